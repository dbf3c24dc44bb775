"""What the task log says about a queued Job, from its Kueue Workload (the objects as Kueue v0.17 writes them)."""

from __future__ import annotations

from operators.launch.kubernetes.workload import position, queue_status, waiting_for, workload_of


def workload(name, created, *, priority=0, queue="team-a", conditions=(), admission=None, uid=None,
             annotations=None):
    return {"metadata": {"name": name, "creationTimestamp": created, "uid": f"uid-{uid or name}",
                         "labels": {"kueue.x-k8s.io/job-uid": uid or name}, "annotations": annotations or {}},
            "spec": {"queueName": queue, "priority": priority},
            "status": {"conditions": [dict(c) for c in conditions], **({"admission": admission} if admission else {})}}


def pending(message):
    return {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message}


ADMITTED = ({"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"})
UNUSED = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, 2 more needed"


def test_a_pending_workload_shows_its_position_and_what_it_waits_for():
    running = workload("a", "2026-01-01T00:00:00Z", conditions=ADMITTED)
    older = workload("b", "2026-01-01T00:00:01Z", conditions=[pending(UNUSED)])
    mine = workload("c", "2026-01-01T00:00:02Z", conditions=[pending(UNUSED)])
    urgent = workload("d", "2026-01-01T00:00:03Z", priority=1000, conditions=[pending(UNUSED)])
    other_queue = workload("e", "2026-01-01T00:00:00Z", queue="team-b", conditions=[pending(UNUSED)])
    everything = [running, older, mine, urgent, other_queue]
    status = queue_status(mine, everything, "team-a")
    assert status.state == "queued"
    assert status.message == ("queued in team-a (position 3, waiting for cpu: 2 more than is free in flavor "
                              "default-flavor)")
    assert position(urgent, everything) == 1  # higher priority goes first
    assert workload_of("c", everything) is mine


def test_the_position_follows_kueues_order_within_one_second_boosts_and_admission_check_evictions():
    # Two jobs submitted within one second share a creation timestamp: Kueue takes the smaller UID first, whatever
    # the names say (a watch that ordered them by name showed the later one at the wrong place half the time).
    second = workload("job-kq-second", "2026-01-01T00:00:10Z", uid="b", conditions=[pending(UNUSED)])
    third = workload("job-kq-third", "2026-01-01T00:00:10Z", uid="a", conditions=[pending(UNUSED)])
    assert (position(third, [second, third]), position(second, [second, third])) == (1, 2)
    boosted = workload("z", "2026-01-01T00:00:20Z", conditions=[pending(UNUSED)],
                       annotations={"kueue.x-k8s.io/priority-boost": "5"})
    assert position(boosted, [second, third, boosted]) == 1
    # An admission check that evicted a Workload puts it back at the time of the eviction, behind the later ones.
    checked = workload("old", "2026-01-01T00:00:00Z", conditions=[pending(UNUSED), {
        "type": "Evicted", "status": "True", "reason": "AdmissionCheck", "lastTransitionTime": "2026-01-01T00:01:00Z"}])
    assert position(checked, [second, third, checked]) == 3


def test_a_workload_that_can_never_fit_is_refused_naming_the_quota():
    message = ("couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default-flavor, "
               "previously considered podsets requests (0) + current podset request (3) > maximum capacity (2)")
    status = queue_status(workload("a", "t", conditions=[pending(message)]), [], "team-a")
    assert status.state == "refused"
    assert "asks for 3 cpu but queue team-a's quota" in status.message and "is 2 cpu in all" in status.message


def test_admission_preemption_and_no_workload_yet():
    admitted = workload("a", "t", conditions=ADMITTED, admission={
        "clusterQueue": "team-a-cq", "podSetAssignments": [{"name": "main", "flavors": {"cpu": "default-flavor"}}]})
    assert queue_status(admitted, [], "team-a").message == (
        "admitted by Kueue in team-a (ClusterQueue team-a-cq, flavor default-flavor): every host starts now")
    evicted = workload("a", "t", conditions=[
        {"type": "QuotaReserved", "status": "False", "message": "Preempted to accommodate a workload"},
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted to accommodate a workload"}])
    status = queue_status(evicted, [evicted], "team-a")
    assert status.state == "preempted" and "resumes from the last checkpoint" in status.note
    assert status.message == "queued in team-a (position 1, waiting for its turn)"
    assert queue_status(None, [], "team-a").state == "waiting"
    assert waiting_for("") == "its turn"


def test_the_watch_waits_while_queued_says_each_change_once_and_fails_a_refused_job():
    from types import SimpleNamespace

    from operators.launch.kubernetes.workload import QueueStatus
    from operators.launch.kubernetes.watch import JobWatch

    lines = []
    watch = JobWatch(None, name="j", namespace="n", instance_count=2, poll_interval=1, image_pull_grace_seconds=1,
                     emit=lines.append)
    suspended = SimpleNamespace(spec=SimpleNamespace(suspend=True))
    queued = QueueStatus("queued", "queued in team-a (position 2, waiting for cpu)")
    watch.started = 0.0  # long ago: the no-pods hint and start-up clocks would have run out
    assert watch.queue_verdict(suspended, queued) is True
    assert watch.queue_verdict(suspended, queued) is True
    assert lines == ["[kubernetes] queued in team-a (position 2, waiting for cpu)"]
    assert watch.started > 0.0  # queue time is not start-up time
    running = SimpleNamespace(spec=SimpleNamespace(suspend=False))
    assert watch.queue_verdict(running, QueueStatus("admitted", "admitted by Kueue in team-a")) is False
    assert watch.queue_verdict(running, None) is False  # not a queued Job: the pods decide
    refused = watch.queue_verdict(suspended, QueueStatus("refused", "the job asks for 3 cpu but ..."))
    assert refused["failure_class"] == "user_error" and refused["job_finished"] is False
