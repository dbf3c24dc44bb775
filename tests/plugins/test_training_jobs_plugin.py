def test_airflow_loads_the_plugin_and_registers_the_link(monkeypatch, repo_root):
    from airflow import plugins_manager

    info = {p["name"]: p for p in plugins_manager.get_plugin_info()}
    assert "training_jobs" in info, plugins_manager.get_import_errors()
    assert [type(link).__name__ for link in plugins_manager.get_operator_extra_links()] == ["ModelArtifactsLink"]
