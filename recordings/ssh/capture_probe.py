"""Run the probe's own remote commands on this machine and print their raw output as JSON.

For a host with a GPU at hand (not a rental): ``python3 recordings/ssh/capture_probe.py OUT.json``
from the repository root. Each entry is one command exactly as ``gpuops/market/probe.py`` sends
it, run by ``bash -c`` as a box's login shell would run it over ssh, with its exit code and its
stdout/stderr untouched, plus the machine's facts that say where it ran. Turning an entry into a
recording (YAML, provenance ``captured``) is ``recordings/ssh/capture_probe.py --write OUT.json``.
Nothing here spends money or reaches a provider.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, date, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuops.market.probe import CUDA_COMMAND, DISK_COMMAND, GPU_COMMAND  # noqa: E402

# (name, step, command, extra environment, working directory)
RUNS = (
    ("gpu", "gpu", GPU_COMMAND, {}, None),
    ("cuda", "cuda", CUDA_COMMAND, {}, None),
    ("cuda-hidden", "cuda", CUDA_COMMAND, {"CUDA_VISIBLE_DEVICES": ""}, None),
    ("disk-cwd", "disk", DISK_COMMAND, {}, None),
    ("disk-shm", "disk", DISK_COMMAND, {}, "/dev/shm"),
)


def _facts() -> dict[str, str]:
    def out(*argv: str) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unavailable: {exc}"
        return (done.stdout + done.stderr).strip()

    return {
        "date": datetime.now(UTC).date().isoformat(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "dd": out("dd", "--version").splitlines()[0] if out("dd", "--version") else "",
        "nvidia_smi": out("nvidia-smi", "--version"),
        "df": out("df", "-hT", ".", "/dev/shm"),
    }


def capture() -> dict[str, object]:
    runs = []
    for name, step, command, extra, cwd in RUNS:
        env = {**os.environ, **extra}
        done = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
        )
        runs.append(
            {
                "name": name,
                "step": step,
                "command": command,
                "env": extra,
                "cwd": cwd or ".",
                "exit_code": done.returncode,
                "stdout": done.stdout,
                "stderr": done.stderr,
            }
        )
    return {"facts": _facts(), "runs": runs}


# capture name -> (recording name, the verdict judge() must give it under the test floors)
RECORDINGS = {
    "gpu": ("nvidia-smi-h200-captured", "pass"),
    "cuda": ("cuda-check-ok-h200-captured", "pass"),
    "cuda-hidden": ("cuda-check-no-visible-device-captured", "cuda-broken"),
    "disk-cwd": ("dd-1gib-ext4-captured", "pass"),
}


def _text(dumper, value: str):  # type: ignore[no-untyped-def]
    style = "|" if "\n" in value and "\r" not in value and value.endswith("\n") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _smi_version(text: str) -> str:
    """'NVIDIA-SMI version  : 580.159.04' -> 'nvidia-smi 580.159.04'."""
    first = text.splitlines()[0] if text else "no nvidia-smi"
    return "nvidia-smi " + first.split(":", 1)[1].strip() if ":" in first else first


def write(capture_json: Path, folder: Path) -> list[Path]:
    """One recording per captured run named in RECORDINGS, provenance ``captured``."""
    import yaml

    yaml.SafeDumper.add_representer(str, _text)
    doc = json.loads(capture_json.read_text())
    facts = doc["facts"]
    written = []
    for run in doc["runs"]:
        if run["name"] not in RECORDINGS:
            continue
        name, expect = RECORDINGS[run["name"]]
        where = "the repository root (ext4)" if run["cwd"] == "." else run["cwd"]
        env = " ".join(f"{k}={v!r}" for k, v in run["env"].items()) or "none added"
        recording = {
            "provenance": {
                "kind": "captured",
                "source": (
                    "recordings/ssh/capture_probe.py run by bash -c on a lent GPU host "
                    f"(kernel {facts['kernel']}, {_smi_version(facts['nvidia_smi'])}, "
                    f"{facts['dd']}); not a Vast host, not a rental, not over ssh"
                ),
                "date": date.fromisoformat(facts["date"]),
                "notes": f"Output untouched. Environment: {env}; working directory {where}.",
            },
            "step": run["step"],
            "expect": expect,
            "command": run["command"],
            "exit_code": run["exit_code"],
            "stdout": run["stdout"],
            "stderr": run["stderr"],
        }
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(recording, sort_keys=False, width=100))
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--write":
        for path in write(Path(argv[2]), Path(__file__).resolve().parent):
            print(f"wrote {path}")
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    Path(argv[1]).write_text(json.dumps(capture(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
