"""`python -m training_sdk` is the `training-job` CLI."""

import sys

from training_sdk.cli import main

sys.exit(main())
