/* A stand-in libcuda.so.1 that lets gpuops check its CUDA probe (gpuops.market.probe.CUDA_COMMAND)
 * on a machine with no GPU. Built by tests/test_ssh.py with `cc -shared -fPIC`; never shipped.
 * The CUresult values and names are the CUDA driver API's own (cuda.h):
 * CUDA_ERROR_OUT_OF_MEMORY 2, CUDA_ERROR_NO_DEVICE 100, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH 803,
 * CUDA_ERROR_UNKNOWN 999.
 * Environment: FAKE_CUDA_INIT=<CUresult> for cuInit, FAKE_CUDA_DEVICES=<n> (default 1),
 * FAKE_CUDA_ALLOC=<CUresult> for cuMemAlloc_v2. */
#include <stddef.h>
#include <stdlib.h>

typedef int CUresult;

static int from_env(const char *name, int fallback) {
    const char *value = getenv(name);
    return value ? atoi(value) : fallback;
}

CUresult cuInit(unsigned int flags) { (void)flags; return from_env("FAKE_CUDA_INIT", 0); }
CUresult cuDeviceGetCount(int *count) { *count = from_env("FAKE_CUDA_DEVICES", 1); return 0; }
CUresult cuDeviceGet(int *device, int ordinal) { *device = ordinal; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) { *ctx = (void *)(size_t)(device + 1); return 0; }
CUresult cuCtxSetCurrent(void *ctx) { (void)ctx; return 0; }
CUresult cuMemAlloc_v2(unsigned long long *ptr, size_t size) { (void)size; *ptr = 4096; return from_env("FAKE_CUDA_ALLOC", 0); }
CUresult cuMemFree_v2(unsigned long long ptr) { (void)ptr; return 0; }
CUresult cuDevicePrimaryCtxRelease(int device) { (void)device; return 0; }

CUresult cuGetErrorName(CUresult error, const char **name) {
    switch (error) {
    case 2: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case 100: *name = "CUDA_ERROR_NO_DEVICE"; return 0;
    case 803: *name = "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"; return 0;
    case 999: *name = "CUDA_ERROR_UNKNOWN"; return 0;
    default: *name = NULL; return 1; /* CUDA_ERROR_INVALID_VALUE */
    }
}
