"""gpuops: a safety-first control plane for unattended GPU jobs on rented hardware."""

__version__ = "0.1.0"
