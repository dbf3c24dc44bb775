"""``python -m training_runtime`` is ``train``."""

import sys

from training_runtime.cli import main

if __name__ == "__main__":
    sys.exit(main())
