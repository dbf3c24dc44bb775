"""The job engine: each stage's work as a plain function taking typed inputs (a JobContext: the validated spec, the
owner, the run, the settings, the job root's layout, the storage hook, a logger) and returning a typed result that
round-trips through JSON (operators/engine/results.py). It imports no Airflow, not even lazily (the data-plane step's
entry, operators/engine/step.py, only for the secrets masker until an Airflow-free one lands): the Airflow operators
in operators/stages/ are adapters around it (XCom and params in, the result's to_dict() out, StageSkipped and
StageFailed turned into Airflow's skip and fail), the cluster's step runs it directly from a payload of primitives,
and the SDK's local mode calls it too.

Layers: below operators/stages/ and operators/pipelines/ (which it never imports), above launch/, state/, cache/,
staging/, storage/, fs/ and jobspec/ (tests/operators/test_import_graph.py).

Nothing is imported here: a DAG file's parse imports the adapters, which import the engine's modules only when a
stage runs."""
