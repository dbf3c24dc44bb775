"""[core] hostname_callable of the several-workers test's Airflow workers (tests/integration/test_celery_workers.py):
on one machine every worker would report the machine's name; each reports the one the test gave it."""

from __future__ import annotations

import os


def hostname() -> str:
    return os.environ["TRAINING_TEST_WORKER_NAME"]
