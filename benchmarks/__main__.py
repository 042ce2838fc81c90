"""``python -m benchmarks <sub-command> ...`` from the repository root (see :mod:`.cli`)."""

import sys

from .cli import main

sys.exit(main())
