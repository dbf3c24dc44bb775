"""The Task SDK names the stages and pipelines use that moved between the Airflow 3 minors the provider supports
(pyproject.toml: from 3.1; tests/integration/test_provider_install.py runs the training_job DAG on 3.1.8). Airflow 3.2
has them in airflow.sdk; 3.1 has the exceptions, the two timetables and the cron presets in the core only. Import
them from here."""

from __future__ import annotations

from airflow import __version__ as _airflow_version

_MINOR = tuple(int(part) for part in _airflow_version.split(".")[:2])

# BaseOperator's retry_exponential_backoff: from 3.2 the multiplier (True would be 1, no growth), in 3.1 a bool
# (True: doubling).
RETRY_BACKOFF_DOUBLING: float | bool = 2.0 if _MINOR >= (3, 2) else True

try:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException, TaskDeferred
except ImportError:  # Airflow 3.1
    from airflow.exceptions import AirflowException, AirflowFailException, AirflowSkipException, TaskDeferred

try:
    from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable
except ImportError:  # Airflow 3.1
    from airflow.timetables.assets import AssetOrTimeSchedule
    from airflow.timetables.trigger import CronTriggerTimetable

try:
    from airflow.sdk.definitions.timetables._cron import CRON_PRESETS
except ImportError:  # Airflow 3.1
    from airflow.utils.dates import cron_presets as CRON_PRESETS

__all__ = ["RETRY_BACKOFF_DOUBLING", "AirflowException", "AirflowFailException", "AirflowSkipException", "TaskDeferred", "AssetOrTimeSchedule",
           "CronTriggerTimetable", "CRON_PRESETS"]
