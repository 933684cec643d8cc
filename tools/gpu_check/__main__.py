"""``python -m tools.gpu_check``: the command line (scripts/gpu-check runs it so)."""

import sys

from tools.gpu_check import main

sys.exit(main())
