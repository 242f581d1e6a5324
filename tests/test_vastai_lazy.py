"""Start-up: the adapter loads vastai's API layer without the package's own start-up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import sys
from gpuops.providers.vastai_lazy import install
assert install()
import vastai.api.client, vastai.api.instances, vastai.api.keys, vastai.api.offers
print(sorted(m for m in ("aiohttp", "vastai.serverless", "vastai.sdk") if m in sys.modules))
from vastai import VastAI
import vastai
print(VastAI.__module__, vastai.api.offers.__name__, vastai.Serverless is not None)
"""


def test_the_api_layer_loads_without_the_serverless_sdk_and_the_package_is_whole_on_demand():
    """offers start-up: `vastai.api` imports without `vastai/__init__` (aiohttp, serverless);
    the first name asked of the package runs that `__init__`, so `from vastai import VastAI`
    still works."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first == "[]"
    assert second == "vastai.sdk vastai.api.offers True"


def test_a_process_that_imported_vastai_already_keeps_the_real_package():
    """offers start-up: the stand-in never replaces a vastai someone imported first."""
    code = "import vastai\nfrom gpuops.providers.vastai_lazy import install\nprint(install())"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "False", done.stderr
