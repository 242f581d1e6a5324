"""`python -m gpuops` runs the CLI."""

import sys

from gpuops.cli import main

sys.exit(main())
