"""`training-job`: submit, follow and control training jobs from a shell.

    training-job submit --entry-point train.py --source-dir . --hp epochs=10 --input train=s3://bucket/train/ --wait
    training-job logs JOB [--follow]        training-job status JOB        training-job stop JOB
    training-job list [--limit N]           training-job attach JOB   (follow the log until the job ends)
    training-job code list                  training-job code delete SHA256...   (your staged code archives)
    training-job reproduce DAG_ID RUN_ID [--map-index N] [--allow-changed-data]   (prints the new run's id)

JOB is the job name the training-jobs view shows, whichever way the job was started (the form, --conf, REST, a
schedule, a search's trial). `list` shows every training DAG's jobs, searches with their trials; the states are
the view's words: queued, running, succeeded, failed, stopped.

The API and credentials: --api-url / TRAINING_API_URL etc. (see training_sdk/session.py); with nothing set, the
local `make airflow`. Exit status: 0 success, 1 the job failed (the reason on stderr), 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from training_sdk.errors import TrainingJobError, TrainingSdkError


def _value(text: str) -> Any:
    """--hp values are JSON when they parse as JSON (10 -> int, 0.1 -> float, true -> bool), else strings."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _pairs(items: Sequence[str] | None, option: str, typed: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise TrainingSdkError(f"{option} {item!r}: write NAME=VALUE")
        result[name] = _value(value) if typed else value
    return result


def _metrics(items: Sequence[str] | None) -> list[dict[str, str]]:
    return [{"Name": name, "Regex": regex} for name, regex in _pairs(items, "--metric").items()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="training-job", description=__doc__.split("\n\n")[0])
    parser.add_argument("--api-url", help="Airflow API URL (default: $TRAINING_API_URL, else http://127.0.0.1:8080)")
    parser.add_argument("--dag-id", help="the training DAG (submit: default training_job; list: every DAG)")
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("submit", help="pack and upload the code, trigger the job")
    code = s.add_mutually_exclusive_group(required=True)
    code.add_argument("--entry-point", help="a .py or .sh file in the source dir (hyperparameters become --name value)")
    code.add_argument("--command", dest="run_command", help="a shell command instead, e.g. 'python train.py $PAI_USER_ARGS'")
    s.add_argument("--source-dir", default=".", help="local directory (packed, honouring .trainingignore) or a URI")
    s.add_argument("--hp", action="append", metavar="NAME=VALUE", help="hyperparameter (repeatable; JSON values typed)")
    s.add_argument("--input", action="append", metavar="CHANNEL=URI", help="input channel (repeatable)")
    s.add_argument("--env", action="append", metavar="NAME=VALUE", help="environment variable (repeatable)")
    s.add_argument("--metric", action="append", metavar="NAME=REGEX", help="metric definition (repeatable)")
    s.add_argument("--output-path", help="artifacts go to <output-path>/<job>/output/ (default: the workspace's)")
    s.add_argument("--checkpoint-path")
    s.add_argument("--image-uri")
    s.add_argument("--instance-type", help="'local' runs here without Airflow")
    s.add_argument("--instance-count", type=int)
    s.add_argument("--layout", choices=["ti", "sagemaker", "pai", "modelarts"])
    s.add_argument("--backend", choices=["local", "kubernetes", "docker"])
    s.add_argument("--max-run-seconds", type=int)
    s.add_argument("--base-job-name")
    s.add_argument("--job-name")
    s.add_argument("--code-location", help="upload the code to this object storage prefix instead of the workspace")
    s.add_argument("--wait", action="store_true", help="stream the training log and wait for the end")

    for name, text in (("logs", "print the training log"), ("status", "the job's status and tasks"),
                       ("stop", "stop a running job"), ("attach", "follow a job's log until it ends")):
        p = sub.add_parser(name, help=text)
        p.add_argument("job_name")
        if name == "logs":
            p.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    ls = sub.add_parser("list", help="recent jobs")
    ls.add_argument("--limit", type=int, default=20)
    rep = sub.add_parser("reproduce", help="run a finished job again on the same code, data versions and image")
    rep.add_argument("reproduce_dag_id", metavar="dag_id", help="the job's DAG")
    rep.add_argument("run_id", help="the job's DAG run")
    rep.add_argument("--map-index", type=int, default=-1, help="a search's trial (default: -1, a single job)")
    rep.add_argument("--allow-changed-data", action="store_true",
                     help="train on a channel's new data when it changed since (else the run refuses, naming it)")
    rep.add_argument("--wait", action="store_true", help="stream the new run's training log and wait for the end")
    staged = sub.add_parser("code", help="your code archives staged by submit (quota, expiry)")
    code_sub = staged.add_subparsers(dest="code_command", required=True)
    code_sub.add_parser("list", help="your staged archives, their expiry and your quota use")
    delete = code_sub.add_parser("delete", help="delete staged archives of yours")
    delete.add_argument("sha256", nargs="+", help="an archive's sha256 (or <sha256>.tar.gz), as `code list` shows")
    return parser


def _session(args):
    # lazy: each command imports only what it runs (the CLI starts on every call)
    from training_sdk.session import Session

    return Session(api_url=args.api_url)


def _submit(args) -> int:
    # lazy: each command imports only what it runs (the CLI starts on every call)
    from training_sdk.estimator import Estimator

    est = Estimator(entry_point=args.entry_point, command=args.run_command, source_dir=args.source_dir,
                    hyperparameters=_pairs(args.hp, "--hp", typed=True), image_uri=args.image_uri,
                    instance_type=args.instance_type, instance_count=args.instance_count, layout=args.layout,
                    backend=args.backend, output_path=args.output_path, checkpoint_path=args.checkpoint_path,
                    metric_definitions=_metrics(args.metric), max_run_seconds=args.max_run_seconds,
                    environment=_pairs(args.env, "--env"), base_job_name=args.base_job_name,
                    code_location=args.code_location, session=None if est_local(args) else _session(args),
                    dag_id=args.dag_id or DEFAULT_DAG)
    job = est.fit(_pairs(args.input, "--input"), wait=args.wait or est.is_local, job_name=args.job_name)
    print(job.job_name)
    if args.wait or est.is_local:
        print(f"model: {job.model_data()}", file=sys.stderr)
    return 0


DEFAULT_DAG = "training_job"
# The SDK's words (SageMaker's) -> the view's, which the CLI prints
VIEW_WORDS = {"Pending": "queued", "InProgress": "running", "Completed": "succeeded", "Failed": "failed",
              "Stopped": "stopped"}


def _list(session, args) -> int:
    # lazy: each command imports only what it runs (the CLI starts on every call)
    from training_sdk.session import ApiError

    try:
        listed = session.jobs(dag_id=args.dag_id, limit=args.limit)
    except ApiError as err:
        if err.status != 404:
            raise
        raise TrainingSdkError(f"{session.api_url} has no training-jobs view (/training-jobs): is the "
                               "training_jobs plugin in its plugins folder?") from None
    for item in listed.get("items") or []:
        if item.get("kind") == "search":
            print(f"{item['job_name']:<50} {item['status']:<10} {item['dag_id']} (search, "
                  f"{len(item.get('trials') or [])} trials)")
            for trial in item.get("trials") or []:
                print(f"  {trial['job_name']:<48} {trial['status']:<10} {trial['dag_id']} {trial.get('created') or '-'}")
        else:
            print(f"{item['job_name'] or item['run_id']:<50} {item['status']:<10} {item['dag_id']} "
                  f"{item.get('created') or '-'}")
    return 0


def _code(session, args) -> int:
    if args.code_command == "delete":
        for sha in args.sha256:
            done = session.delete_code(sha)
            print(f"deleted {done['deleted']} ({done['bytes']} bytes)")
        return 0
    staged = session.staged_code()
    for archive in staged.get("archives") or []:
        print(f"{archive['sha256']}  {archive['bytes']:>10} bytes  uploaded {archive['uploaded_at']}  "
              f"expires {archive.get('expires_at') or 'never'}")
    print(f"{staged['used_bytes']} of {staged['quota_bytes']} bytes used ([training] sdk_code_quota_bytes)")
    return 0


def _reproduce(session, args) -> int:
    # lazy: each command imports only what it runs (the CLI starts on every call)
    from training_sdk.job import TrainingJob

    reproduced = TrainingJob(args.run_id, dag_id=args.reproduce_dag_id, session=session, run_id=args.run_id,
                             map_index=args.map_index)
    job = reproduced.reproduce(allow_changed_data=args.allow_changed_data)
    print(job.run_id)
    if args.wait:
        job.wait(logs=True)
        print(f"model: {job.model_data()}", file=sys.stderr)
    return 0


def est_local(args) -> bool:
    return (args.instance_type or "").lower() in ("local", "local_gpu")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "submit":
            return _submit(args)
        # lazy: each command imports only what it runs (the CLI starts on every call)
        from training_sdk.job import TrainingJob

        session = _session(args)
        if args.command == "list":
            return _list(session, args)
        if args.command == "code":
            return _code(session, args)
        if args.command == "reproduce":
            return _reproduce(session, args)
        job = TrainingJob.attach(args.job_name, dag_id=args.dag_id or DEFAULT_DAG, session=session)
        if args.command == "status":
            status = job.status
            print(f"{job.job_name}: {VIEW_WORDS.get(status, status)}")
            for task, state in job.task_states().items():
                print(f"  {task:<20} {state or '-'}")
            if status == "Completed":
                print(f"  model: {job.model_data()}")
            elif status in ("Failed", "Stopped"):
                print(f"  reason: {job.failure_reason()}")
            return 0
        if args.command == "stop":
            job.stop()
            print(f"{job.job_name}: stop requested")
            return 0
        if args.command == "logs":
            job.logs(follow=args.follow)
            return 0
        if args.command == "attach":
            job.wait(logs=True)
            print(f"model: {job.model_data()}", file=sys.stderr)
            return 0
    except TrainingJobError as err:
        print(f"training-job: {err}", file=sys.stderr)
        return 1
    except TrainingSdkError as err:
        print(f"training-job: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
