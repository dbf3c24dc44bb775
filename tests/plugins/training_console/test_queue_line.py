"""A Kubernetes job waiting in a Kueue queue: the list and the job page say "queued in <queue>" and show its place,
from the queue launch_training recorded before it deferred and the trigger's lines in the task log."""

from datetime import datetime, timedelta, timezone

from operators.stage_names import STAGES
from training_console.jobs import Job, query_items
from training_console.queue_line import latest_queue_line

T0 = datetime(2026, 11, 26, 3, 0, tzinfo=timezone.utc)

# The task log as Airflow's log reader gives it while the trigger waits (structured records; the launch stage's and
# the trigger's lines, then Airflow's own).
RECORDED_LOG = [
    {"event": "::group::Log message source details"},
    {"event": "::endgroup::"},
    {"event": "Created Job training/demo-1 (2 hosts)", "logger": "airflow.task.operators.LaunchTrainingOperator"},
    {"event": "Pausing task as DEFERRED. ", "logger": "task"},
    {"event": "[kubernetes] waiting for Kueue to queue the Job in team-a", "logger": "airflow.triggers"},
    {"event": "[kubernetes] queued in team-a (position 2, waiting for cpu: 2 more than is free in flavor default)"},
    {"event": "trigger heartbeat"},
    {"event": "[kubernetes] still queued in team-a (position 1, waiting for cpu: 2 more than is free in flavor "
              "default); 60 s in the queue"},
]


def deferred(queue=None, line=None, run_id="demo-1"):
    job = Job("training_job", run_id, -1, "", run_state="running", run_after=T0)
    for i, stage in enumerate(STAGES[:5]):
        job.tis[stage] = ("success", T0 + timedelta(seconds=i), T0 + timedelta(seconds=i + 1), 1)
    job.tis["launch_training"] = ("deferred", T0 + timedelta(seconds=5), None, 1)
    job.record_result("validate_spec", {"job_name": run_id, "backend": "kubernetes", "instance_count": 2})
    job.queue = queue
    job.queue_line = line
    return job


def test_the_latest_queue_line_of_a_recorded_log_is_the_jobs_place():
    assert latest_queue_line(RECORDED_LOG) == ("still queued in team-a (position 1, waiting for cpu: 2 more than is "
                                               "free in flavor default); 60 s in the queue")
    assert latest_queue_line([*RECORDED_LOG, "[kubernetes] preempted in team-a (Preempted); queued again"]) == \
        "preempted in team-a (Preempted); queued again"
    assert latest_queue_line([{"event": "step 1 loss=0.5"}, "plain text line"]) is None


def test_a_deferred_job_in_a_queue_is_queued_in_it_with_its_place_until_kueue_admits_it():
    line = latest_queue_line(RECORDED_LOG)
    waiting = deferred({"queue": "team-a", "priority": "low"}, line).summary(T0 + timedelta(minutes=1))
    assert (waiting["status"], waiting["queue"], waiting["queue_line"]) == ("queued", "team-a", line)
    # no line in the log yet: still queued, the page says where
    assert deferred({"queue": "team-a", "priority": ""}).summary(T0)["queue"] == "team-a"
    admitted = deferred({"queue": "team-a", "priority": ""},
                        "admitted by Kueue in team-a (ClusterQueue cq, flavor default): every host starts now")
    assert admitted.status() == ("running", None) and admitted.summary(T0)["queue"] is None
    assert deferred(None).summary(T0)["status"] == "running"  # deferred without a queue: training


def test_the_list_filters_queued_jobs_and_shows_the_queue():
    jobs = [deferred({"queue": "team-a", "priority": ""}, latest_queue_line(RECORDED_LOG), "waits"),
            deferred(None, None, "trains")]
    items = query_items(jobs, status="queued", now=T0)["items"]
    assert [(i["job_name"], i["queue"]) for i in items] == [("waits", "team-a")]


def test_a_training_that_prints_a_queue_line_does_not_move_its_own_job():
    planted = {"event": "[bert-0] [kubernetes] admitted by Kueue in team-a"}  # the script's output, host-prefixed
    assert latest_queue_line([*RECORDED_LOG, planted]) == latest_queue_line(RECORDED_LOG)


def test_a_local_job_waiting_for_the_workers_gpus_is_queued_until_it_has_them():
    waiting = {"event": "Waiting for 2 GPU(s): 1 of 4 free, the others held by big-job",
               "logger": "operators.launch.worker_slots"}
    given = {"event": "Given GPU(s) /dev/nvidia1, /dev/nvidia3 of this worker", "logger": "operators.launch.worker_slots"}
    planted = {"event": "Given GPU(s) everything", "logger": "airflow.task.operators.LaunchTrainingOperator"}
    job = deferred({"queue": "this worker's GPUs", "priority": ""}, latest_queue_line([waiting, planted]))
    job.tis["launch_training"] = ("running", T0, None, 1)  # the local backend waits in the running task
    assert latest_queue_line([waiting, planted]) == waiting["event"]  # the training's own output cannot pose as one
    summary = job.summary(T0)
    assert (summary["status"], summary["queue"]) == ("queued", "this worker's GPUs")
    job.queue_line = latest_queue_line([waiting, given])
    assert job.status() == ("running", None)
