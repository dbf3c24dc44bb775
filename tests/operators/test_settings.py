"""[training] settings through Airflow's conf getters (getint, getfloat, getboolean, getjson): AIRFLOW__ variables
override airflow.cfg, empty means the default, a bad value is one line naming the setting."""

import re

import pytest

from operators.settings import kubernetes_settings, sdk_code_max_bytes, training_settings


def test_values_from_the_environment_are_typed(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__KEEP_FINISHED_JOBS", "True")
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__NODE_SELECTOR", '{"pool": "gpu"}')
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__IMAGE_PULL_SECRETS", " regcred, other ,")
    monkeypatch.setenv("AIRFLOW__TRAINING__RETENTION_DAYS", "1.5")
    monkeypatch.setenv("AIRFLOW__TRAINING__SDK_CODE_MAX_BYTES", "1024")
    monkeypatch.setenv("AIRFLOW__TRAINING__TRANSFER_CONCURRENCY", "")  # empty: the default
    k8s, training = kubernetes_settings(), training_settings()
    assert k8s.keep_finished_jobs is True and k8s.node_selector == {"pool": "gpu"}
    assert k8s.image_pull_secrets == ("regcred", "other")
    assert training.retention_days == 1.5 and training.transfer_concurrency == 16
    assert sdk_code_max_bytes() == 1024


@pytest.mark.parametrize("variable, value, message", [
    ("AIRFLOW__TRAINING_KUBERNETES__DEFERRABLE", "sometimes",
     "airflow.cfg [training.kubernetes] deferrable must be true or false, got 'sometimes'"),
    ("AIRFLOW__TRAINING_KUBERNETES__TOLERATIONS", "[{", "[training.kubernetes] tolerations must be valid JSON"),
    ("AIRFLOW__TRAINING_KUBERNETES__RUN_AS_USER", "root", "[training.kubernetes] run_as_user must be an integer"),
    ("AIRFLOW__TRAINING__MAX_CONCURRENT_TRIALS", "0", "max_concurrent_trials must be an integer >= 1, got '0'"),
    ("AIRFLOW__TRAINING__RETENTION_DAYS", "-2", "retention_days must be a number >= 0, got '-2'"),
    ("AIRFLOW__TRAINING__RETENTION_DAYS", "soon", "retention_days must be a number >= 0, got 'soon'"),
])
def test_a_bad_value_is_one_line_naming_the_setting(monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        kubernetes_settings() if "KUBERNETES" in variable else training_settings()
    assert str(err.value).startswith("airflow.cfg [") and "\n" not in str(err.value)
