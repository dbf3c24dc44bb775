"""[training] settings through Airflow's conf getters (getint, getfloat, getboolean, getjson): AIRFLOW__ variables
override airflow.cfg, empty means the default, a bad value is one line naming the setting. (Each backend's section:
tests/operators/launch/<backend>/.)"""

import re

import pytest

from operators.settings import sdk_code_max_bytes, training_settings


def test_values_from_the_environment_are_typed(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING__RETENTION_DAYS", "1.5")
    monkeypatch.setenv("AIRFLOW__TRAINING__SDK_CODE_MAX_BYTES", "1024")
    monkeypatch.setenv("AIRFLOW__TRAINING__TRANSFER_CONCURRENCY", "")  # empty: the default
    training = training_settings()
    assert training.retention_days == 1.5 and training.transfer_concurrency == 16
    assert sdk_code_max_bytes() == 1024


@pytest.mark.parametrize("variable, value, message", [
    ("AIRFLOW__TRAINING__MAX_CONCURRENT_TRIALS", "0", "max_concurrent_trials must be an integer >= 1, got '0'"),
    ("AIRFLOW__TRAINING__RETENTION_DAYS", "-2", "retention_days must be a number >= 0, got '-2'"),
    ("AIRFLOW__TRAINING__RETENTION_DAYS", "soon", "retention_days must be a number >= 0, got 'soon'"),
])
def test_a_bad_value_is_one_line_naming_the_setting(monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        training_settings()
    assert str(err.value).startswith("airflow.cfg [") and "\n" not in str(err.value)
