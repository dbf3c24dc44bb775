"""[training.kubernetes] settings through the shared typed getters (operators/settings.py): AIRFLOW__ variables
override airflow.cfg, a bad value is one line naming the setting."""

import re

import pytest

from operators.launch.kubernetes.settings import kubernetes_settings


def test_values_from_the_environment_are_typed(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__KEEP_FINISHED_JOBS", "True")
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__NODE_SELECTOR", '{"pool": "gpu"}')
    monkeypatch.setenv("AIRFLOW__TRAINING_KUBERNETES__IMAGE_PULL_SECRETS", " regcred, other ,")
    k8s = kubernetes_settings()
    assert k8s.keep_finished_jobs is True and k8s.node_selector == {"pool": "gpu"}
    assert k8s.image_pull_secrets == ("regcred", "other")


@pytest.mark.parametrize("variable, value, message", [
    ("AIRFLOW__TRAINING_KUBERNETES__DEFERRABLE", "sometimes",
     "airflow.cfg [training.kubernetes] deferrable must be true or false, got 'sometimes'"),
    ("AIRFLOW__TRAINING_KUBERNETES__TOLERATIONS", "[{", "[training.kubernetes] tolerations must be valid JSON"),
    ("AIRFLOW__TRAINING_KUBERNETES__RUN_AS_USER", "root", "[training.kubernetes] run_as_user must be an integer"),
])
def test_a_bad_value_is_one_line_naming_the_setting(monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        kubernetes_settings()
    assert str(err.value).startswith("airflow.cfg [") and "\n" not in str(err.value)


def test_a_deployment_that_names_no_data_plane_moves_the_bytes_in_the_cluster(monkeypatch):
    """The shipped airflow.cfg says shared_volume (this checkout's local cluster mounts its workspace); a deployment's
    airflow.cfg without the line gets the cluster's data plane, which needs no volume on the Airflow workers."""
    from airflow.configuration import conf

    from operators.launch.kubernetes.options import resolve_options

    assert kubernetes_settings().data_plane == "shared_volume"  # the shipped airflow.cfg, as the suite runs it
    monkeypatch.delenv("AIRFLOW__TRAINING_KUBERNETES__DATA_PLANE", raising=False)
    saved = conf.get("training.kubernetes", "data_plane")
    conf.remove_option("training.kubernetes", "data_plane")
    try:
        settings = kubernetes_settings()
        assert settings.data_plane == "cluster"
        assert resolve_options({}, settings).in_cluster
    finally:
        conf.set("training.kubernetes", "data_plane", saved)
