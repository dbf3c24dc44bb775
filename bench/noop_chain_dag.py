"""bench_noop_chain: the comparison DAG of benchmark 4 — as many no-op tasks as training_job has stages, wired the same
way (a chain, each task's XCom read by the next), so the difference in task time is what our stages add.

Lives in bench/, not dags/: it is not a product DAG. Each task runs real code (EmptyOperator would be skipped by the
scheduler without running) and returns a small dict, like our stages.
"""

from airflow.sdk import DAG, task

STAGES = ["validate_spec", "stage_code", "prefetch_data", "write_configs", "restore", "launch_training",
          "upload_artifacts", "publish_model"]

with DAG(dag_id="bench_noop_chain", schedule=None, catchup=False, tags=["bench"]) as dag:
    previous = None
    for name in STAGES:

        @task(task_id=name)
        def noop(upstream=None) -> dict:
            return {"ok": True}

        current = noop(previous) if previous is not None else noop()
        previous = current
