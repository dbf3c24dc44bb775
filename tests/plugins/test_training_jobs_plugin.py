def test_airflow_loads_the_plugin_with_its_app_views_and_links(repo_root):
    from importlib.metadata import entry_points

    from airflow import plugins_manager

    # Registered through the distribution's entry point (pyproject.toml), not the plugins folder.
    assert "training_jobs" in {ep.name for ep in entry_points(group="airflow.plugins")}, (
        "the installed airflow-training-jobs predates its airflow.plugins entry points: run make install")
    info = {p["name"]: p for p in plugins_manager.get_plugin_info()}
    assert "training_jobs" in info, plugins_manager.get_import_errors()
    assert {type(link).__name__ for link in plugins_manager.get_operator_extra_links()} >= {
        "ModelArtifactsLink", "MetricsLink", "FailureReasonLink", "HostLogsLink", "TrainingJobLink"}
    plugin = info["training_jobs"]
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/training-jobs"]
    views = {v["destination"]: v for v in plugin["external_views"]}
    assert views["nav"]["href"] == "/training-jobs/ui/"
    assert views["dag_run"]["href"] == "/training-jobs/ui/#/run/{DAG_ID}/{RUN_ID}"


def test_loading_the_plugin_in_a_task_process_does_not_build_the_app(repo_root):
    """Every task process loads the plugins: the FastAPI app (seconds of imports) is only built where it is read."""
    import os
    import subprocess
    import sys

    code = ("import sys, training_jobs_plugin; "
            "assert 'training_console.app' not in sys.modules and 'fastapi' not in sys.modules, 'eager import'")
    path = os.pathsep.join([str(repo_root / "plugins"), str(repo_root), os.environ.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": path})
    assert result.returncode == 0, result.stderr[-2000:]
