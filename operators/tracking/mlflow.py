"""MLflow tracking, when an admin sets [training] mlflow_tracking_uri: each training job is an MLflow run.

    experiment  the job's base_job_name (its DAG id when the spec names none); with [training]
                mlflow_experiment_prefix set, `<prefix><DAG id>/<base job name>` (experiment_name)
    run         named after the job; tag training.job_name finds it again (a retried launch task reattaches)
    params      the hyperparameters (only those: never the environment, connections or secrets by reference)
    metrics     every series of the job's metrics stream, with its steps and wall-clock times, sent as it grows
    tags        the spec's own tags (operators/jobspec/tags.py), then training.job_name, training.dag_id, training.run_id,
                training.map_index, training.run_link (the job's page), training.model_uri once publish_model has the
                uploaded model.tar.gz, and the lineage tags (lineage_tags: code digest, image digest, parent,
                training.lineage_link: the console's Lineage panel of the job)
    artifacts   model/reference.json: {"model_uri": ...}, a reference (the archive is not copied to MLflow)
    registry    a retraining DAG's promote_model registers the promoted model.tar.gz as a version of the registered
                model named after the base job name (operators/pipelines/retraining.py); the version carries the
                run's lineage (code digest, each channel's data version, image digest) as tags and in its
                description, with a link to the console's Lineage panel of the job that made it (version_lineage)

MLflow's own client (mlflow-skinny) is imported here, by the tasks, never at DAG parse. Tracking is best effort:
the first call that fails logs one warning and turns tracking off for the rest of the task; the training goes on
and its metrics stay in metrics.json. The tracking URI's user:password part (if an admin put credentials there) is
never logged; MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD / MLFLOW_TRACKING_TOKEN in the worker's
environment are the better place for them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit, urlunsplit

from operators.console_urls import job_page_url, lineage_view_url
from operators.settings import mlflow_experiment_prefix, mlflow_tracking_uri

log = logging.getLogger(__name__)

JOB_TAG = "training.job_name"
MAP_INDEX_TAG = "training.map_index"  # the job's map index (a search's trial; -1 a single job): its console page
MODEL_URI_TAG = "training.model_uri"
MODEL_REFERENCE = "model/reference.json"  # the run's artifact naming the uploaded model.tar.gz
PUSH_SECONDS = 5.0  # how often streamed points go to the server while training runs
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
# A server that does not answer must not hold the training's task: a few quick tries per call instead of MLflow's
# default (7 retries with exponential backoff, minutes); a busy server still gets 30 s to answer. An admin's own
# MLFLOW_HTTP_* variables win.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
_BAD_KEY_CHARS = re.compile(r"[^\w./\- :]")


def configured_uri() -> str:
    """[training] mlflow_tracking_uri ("" = tracking off)."""
    return mlflow_tracking_uri()


def experiment_name(base_job_name: str | None, dag_id: str) -> str:
    """The job's experiment. The base job name is the triggering user's choice: without a prefix it may name any
    experiment on the server (docs/security.md); with [training] mlflow_experiment_prefix (an admin setting) the
    DAG id, which the user cannot choose, comes first, so a run lands only among its own DAG's experiments."""
    base = base_job_name or dag_id
    prefix = mlflow_experiment_prefix()
    return f"{prefix}{dag_id}/{base}" if prefix else base


def registered_model_name(base_job_name: str | None, dag_id: str) -> str:
    """The Model Registry's name for a retraining's promoted models: the experiment's name (so the admin's prefix
    fences it the same way), with '/' and ':' as '.', which registered-model names may not contain."""
    return experiment_name(base_job_name, dag_id).replace("/", ".").replace(":", ".")


def shown_uri(uri: str) -> str:
    """The URI without its user:password part, for messages."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "(the configured URI)"
    if parts.username is None and parts.password is None:
        return uri
    host = parts.hostname or ""
    return urlunsplit((parts.scheme, host + (f":{parts.port}" if parts.port else ""), parts.path, "", ""))


def metric_key(name: str) -> str:
    """A metric or param name as MLflow accepts it: characters outside [A-Za-z0-9_./- :] become "_", no leading
    "/" and no ".." component."""
    key = _BAD_KEY_CHARS.sub("_", name).lstrip("/") or "_"
    return "/".join("_" if part == ".." else part for part in key.split("/"))[:250]


def _client(uri: str):
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # the platform reports nothing beyond its own server
    # lazy: mlflow, only once tracking is on (never at DAG parse) and after _client set its environment
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def _failure(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}"


class JobRun:
    """One job's MLflow run, as the launch task sees it. Every method is best effort (see the module doc)."""

    def __init__(self, uri: str, *, experiment: str, job_name: str, dag_id: str, run_id: str, run_link: str,
                 hyperparameters: Mapping[str, Any], tags: Mapping[str, str] | None = None,
                 logger: logging.Logger | None = None, map_index: int = -1):
        self.uri = uri
        self.experiment = experiment
        self.job_name = job_name
        # the spec's tags first: the platform's own keys come after and win (the spec refuses those names anyway)
        self.tags = {**{metric_key(k): str(v) for k, v in (tags or {}).items()}, JOB_TAG: job_name, "training.dag_id": dag_id, "training.run_id": run_id,
                     MAP_INDEX_TAG: str(map_index), "training.run_link": run_link, "mlflow.runName": job_name}
        self.hyperparameters = dict(hyperparameters)
        self.log = logger or log
        self.mlflow_run_id: str | None = None
        self._client = None
        self._sent: dict[str, int] = {}  # series name -> points already on the server
        self._off = False
        self._lock = threading.Lock()  # the follower thread and the task's own thread both push

    def _guard(self, what: str, call: Callable[[], Any]) -> Any:
        if self._off:
            return None
        try:
            return call()
        except Exception as err:  # noqa: BLE001 - a tracking server must never fail a training
            self._off = True
            self.log.warning("MLflow tracking at %s failed while %s (%s); tracking is off for the rest of this "
                             "task, the training goes on and its metrics stay in metrics.json", shown_uri(self.uri),
                             what, _failure(err).replace(self.uri, shown_uri(self.uri)))
            return None

    def start(self) -> str | None:
        """Find this job's run (a retried task reattaches to it) or create it; returns its MLflow run id."""
        return self._guard("starting the run", self._start)

    def _start(self) -> str:
        # lazy: mlflow, only once tracking is on (never at DAG parse) and after _client set its environment
        from mlflow.entities import Param, RunTag

        client = self._client = _client(self.uri)
        experiment = client.get_experiment_by_name(self.experiment)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(self.experiment)
        # Only this DAG run's run of the job is continued: a later job that reuses the name starts its own.
        found = [r for r in client.search_runs([experiment_id], filter_string=f"tags.`{JOB_TAG}` = '{self.job_name}'",
                                               max_results=100)
                 if all(r.data.tags.get(k) == self.tags[k] for k in ("training.dag_id", "training.run_id"))]
        if found:
            run = found[0]
            self.mlflow_run_id = run.info.run_id
            for key in run.data.metrics:  # points sent by an earlier attempt are not sent twice
                self._sent[key] = len(client.get_metric_history(run.info.run_id, key))
            client.update_run(run.info.run_id, status="RUNNING")
            self.log.info("MLflow: job %s continues run %s in experiment %r (%s)", self.job_name,
                          run.info.run_id, self.experiment, shown_uri(self.uri))
            return run.info.run_id
        run = client.create_run(experiment_id, tags=self.tags, run_name=self.job_name)
        self.mlflow_run_id = run.info.run_id
        params = [Param(metric_key(k), str(v)[:MAX_PARAM_CHARS]) for k, v in sorted(self.hyperparameters.items())]
        client.log_batch(run.info.run_id, params=params,
                         tags=[RunTag(k, v) for k, v in self.tags.items() if k != "mlflow.runName"])
        self.log.info("MLflow: job %s is run %s in experiment %r (%s)", self.job_name, run.info.run_id,
                      self.experiment, shown_uri(self.uri))
        return run.info.run_id

    def push(self, series: Mapping[str, list[Mapping[str, Any]]]) -> None:
        """Send the points of `series` (MetricCollector.series) that are not on the server yet."""
        if self.mlflow_run_id is None:
            return
        self._guard("sending metrics", lambda: self._push(series))

    def _push(self, series: Mapping[str, list[Mapping[str, Any]]]) -> None:
        # lazy: mlflow, only once tracking is on (never at DAG parse) and after _client set its environment
        from mlflow.entities import Metric

        with self._lock:
            batch, sent = [], {}
            for name, points in list(series.items()):
                key = metric_key(name)
                done = self._sent.get(key, 0)
                new = list(points[done:])
                batch += [Metric(key, float(p["value"]), int(float(p.get("timestamp") or time.time()) * 1000),
                                 int(p.get("step") or 0)) for p in new]
                sent[key] = done + len(new)
            if batch:
                self._client.log_batch(self.mlflow_run_id, metrics=batch)
            self._sent.update(sent)

    def follow(self, snapshot: Callable[[], Mapping[str, list]], every: float = PUSH_SECONDS) -> threading.Event:
        """Push snapshot() every `every` seconds from a daemon thread until the returned event is set."""
        done = threading.Event()

        def loop() -> None:
            while not done.wait(every) and not self._off:
                try:
                    series = snapshot()
                except Exception as err:  # noqa: BLE001 - a view of the metrics that cannot be read now
                    self.log.debug("MLflow: no metrics snapshot this time: %s", err)
                    continue
                self.push(series)

        threading.Thread(target=loop, name=f"mlflow-{self.job_name}", daemon=True).start()
        return done

    def finish(self, series: Mapping[str, list], status: str) -> None:
        """The last points, then the run's end state (FINISHED, FAILED or KILLED)."""
        if self.mlflow_run_id is None:
            return
        self.push(series)
        self._guard("ending the run", lambda: self._client.set_terminated(self.mlflow_run_id, status=status))


def job_run(uri: str, spec, *, dag_id: str, run_id: str, map_index: int = -1,
            logger: logging.Logger | None = None) -> JobRun:
    """The JobRun of a validated JobSpec in one DAG run."""
    try:
        # The job's own key: -1 for a job that is not one trial of a search (the console knows no /0 of such a run)
        link = job_page_url(dag_id, run_id, map_index if map_index is not None else -1)
    except Exception:  # noqa: BLE001 - no Airflow config (a unit test): the run is still worth tracking
        link = ""
    return JobRun(uri, experiment=experiment_name(spec.base_job_name, dag_id), job_name=spec.job_name, dag_id=dag_id,
                  run_id=run_id, run_link=link, hyperparameters=spec.hyperparameters,
                  tags=getattr(spec, "tags", None), logger=logger,
                  map_index=map_index if map_index is not None else -1)


def _find_run(client, experiment: str, job_name: str, run_id: str | None = None):
    """The newest run of the job (of that DAG run, when given) in the experiment, or None."""
    experiment_obj = client.get_experiment_by_name(experiment)
    if experiment_obj is None:
        return None
    found = [r for r in client.search_runs([experiment_obj.experiment_id], order_by=["attributes.start_time DESC"],
                                           filter_string=f"tags.`{JOB_TAG}` = '{job_name}'", max_results=100)
             if run_id is None or r.data.tags.get("training.run_id") == run_id]
    return found[0] if found else None


def record_model(uri: str, *, experiment: str, job_name: str, model_uri: str, run_id: str | None = None,
                 logger: logging.Logger | None = None) -> bool:
    """Tag the job's run with the uploaded model's URI (the model stays where it was uploaded: a reference)."""
    logger = logger or log
    try:
        client = _client(uri)
        run = _find_run(client, experiment, job_name, run_id)
        if run is None:
            logger.warning("MLflow: no run of job %s in experiment %r at %s: the model URI is not recorded",
                           job_name, experiment, shown_uri(uri))
            return False
        client.set_tag(run.info.run_id, MODEL_URI_TAG, model_uri)
        # The run's "model" artifact is a reference (the archive stays where the job uploaded it), so a registry
        # version can name runs:/<run>/model whatever store the model is in.
        client.log_dict(run.info.run_id, {"model_uri": model_uri, "job_name": job_name}, MODEL_REFERENCE)
        logger.info("MLflow: run %s records the model %s", run.info.run_id, model_uri)
        return True
    except Exception as err:  # noqa: BLE001 - a tracking server must never fail a training
        logger.warning("MLflow tracking at %s failed while recording the model of job %s (%s); the model is "
                       "published all the same", shown_uri(uri), job_name, _failure(err))
        return False


def version_source(model_uri: str, run) -> str:
    """A registry version's source: the object-store URI itself; a local model (which MLflow's registry refuses
    outside the run's artifacts) through the run's model reference."""
    scheme = model_uri.split("://", 1)[0] if "://" in model_uri else ""
    if scheme and scheme != "file" or run is None:
        return model_uri
    return f"runs:/{run.info.run_id}/{MODEL_REFERENCE.rsplit('/', 1)[0]}"


def register_model_version(uri: str, *, name: str, experiment: str, job_name: str, model_uri: str,
                           run_id: str | None = None, logger: logging.Logger | None = None) -> str | None:
    """Register `model_uri` as a new version of the registered model `name` (created when missing), linked to the
    job's run when there is one, carrying the run's lineage (version_lineage: tags, and a description whose link opens
    the job's Lineage panel in the console); returns the version, or None (after a warning) when the server failed."""
    logger = logger or log
    try:
        # lazy: mlflow, only once tracking is on (never at DAG parse) and after _client set its environment
        from mlflow.exceptions import MlflowException

        client = _client(uri)
        try:
            client.get_registered_model(name)
        except MlflowException as err:
            if getattr(err, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
                raise
            client.create_registered_model(name, description=f"Promoted models of the retraining of {name}")
        run = _find_run(client, experiment, job_name, run_id)
        if run is not None:
            run = client.get_run(run.info.run_id)  # with its dataset inputs: the channels' data versions
        run_link = (run.data.tags.get("training.run_link") or None) if run else None
        tags, description = version_lineage(run, job_name=job_name, model_uri=model_uri)
        version = client.create_model_version(name, source=version_source(model_uri, run),
                                              run_id=run.info.run_id if run else None,
                                              tags=tags, run_link=run_link, description=description)
        logger.info("MLflow: %s is version %s of registered model %r", model_uri, version.version, name)
        return str(version.version)
    except Exception as err:  # noqa: BLE001 - the promotion itself (the pointer, the Asset event) stands
        logger.warning("MLflow tracking at %s failed while registering %s as a version of %r (%s); the model is "
                       "promoted all the same", shown_uri(uri), model_uri, name, _failure(err))
        return None


# -- lineage (operators/lineage/record.py): the run's datasets and what made its model ---------------------------------

CODE_DIGEST_TAG = "training.code_digest"
CODE_URI_TAG = "training.code_uri"
IMAGE_TAG = "training.image"
IMAGE_DIGEST_TAG = "training.image_digest"
PARENT_MODEL_TAG = "training.parent_model_uri"
PARENT_LINEAGE_TAG = "training.parent_lineage_uri"
LINEAGE_URI_TAG = "training.lineage_uri"
LINEAGE_LINK_TAG = "training.lineage_link"  # the console's Lineage panel of the job (console_urls.lineage_view_url)
DATA_VERSION_TAG_PREFIX = "training.data_version."  # a registered version's tag per channel: its data version
REPRODUCES_TAG = "training.reproduces"
DATA_VERSION_INPUT_TAG = "training.data_version"  # the whole data version (the dataset's digest holds 36 characters)
MAX_DATASET_DIGEST = 36  # MLflow's limit on a dataset's digest (mlflow.utils.validation.MAX_DATASET_DIGEST_SIZE)
MAX_TAG_CHARS = 5000  # a run tag's value (the tracking server's limit is 8000; a URI stays far below either)


def _dataset_source_type(uri: str) -> str:
    """MLflow's source type for a channel URI: its scheme (s3, cos, oss, obs), "local" for a path or file://."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    return "local" if scheme in ("", "file") else scheme


def lineage_datasets(record: Mapping[str, Any]) -> list:
    """The record's channels as MLflow DatasetInputs: name = the channel, source = its URI, digest = its data version
    (cut to MLflow's 36 characters; the whole one is the input's tag training.data_version and in the profile),
    context (the input tag mlflow.data.context) = the channel."""
    # lazy: mlflow, only once tracking is on (never at DAG parse)
    from mlflow.entities import Dataset, DatasetInput, InputTag

    inputs = []
    for channel, part in sorted((record.get("channels") or {}).items()):
        version = part.get("data_version") or ""
        dataset = Dataset(name=channel, digest=(version or "unknown")[:MAX_DATASET_DIGEST],
                          source_type=_dataset_source_type(part["uri"]), source=json.dumps({"uri": part["uri"]}),
                          profile=json.dumps({"data_version": version or None, "objects": part.get("objects"),
                                               "bytes": part.get("bytes")}))
        tags = [InputTag("mlflow.data.context", channel)]
        if version:
            tags.append(InputTag(DATA_VERSION_INPUT_TAG, version))
        inputs.append(DatasetInput(dataset=dataset, tags=tags))
    return inputs


def lineage_tags(record: Mapping[str, Any]) -> dict[str, str]:
    """The record's code digest, image and its digest, parent model and where the record is, as run tags (the facts
    the record has; none is made up)."""
    code, image = record.get("code") or {}, record.get("image") or {}
    parent, reproduces = record.get("parent") or {}, record.get("reproduces") or {}
    tags = {CODE_URI_TAG: code.get("source_uri"), CODE_DIGEST_TAG: code.get("digest"), IMAGE_TAG: image.get("name"),
            IMAGE_DIGEST_TAG: image.get("digest"), PARENT_MODEL_TAG: parent.get("model_uri"),
            PARENT_LINEAGE_TAG: parent.get("lineage_uri"), LINEAGE_URI_TAG: record.get("published_uri"),
            REPRODUCES_TAG: reproduces.get("job_name")}
    return {key: str(value)[:MAX_TAG_CHARS] for key, value in tags.items() if value}


def record_lineage(uri: str, *, experiment: str, job_name: str, record: Mapping[str, Any], run_id: str | None = None,
                   logger: logging.Logger | None = None) -> bool:
    """Log the lineage record `record` (LineageRecord's JSON dict) on the job's run: its channels through MLflow's
    dataset tracking (log_inputs), the code digest, image digest and parent as tags. Best effort, like the rest: a
    failing server is one warning, and False."""
    logger = logger or log
    try:
        # lazy: mlflow, only once tracking is on (never at DAG parse)
        from mlflow.entities import RunTag

        client = _client(uri)
        run = _find_run(client, experiment, job_name, run_id)
        if run is None:
            logger.warning("MLflow: no run of job %s in experiment %r at %s: its lineage is not recorded", job_name,
                           experiment, shown_uri(uri))
            return False
        datasets = lineage_datasets(record)
        if datasets:
            client.log_inputs(run.info.run_id, datasets=datasets)
        tags = lineage_tags(record)
        link = lineage_link(run.data.tags, record)
        if link:
            tags[LINEAGE_LINK_TAG] = link
        if tags:
            client.log_batch(run.info.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        logger.info("MLflow: run %s records the lineage of %s (%d dataset(s), %s)", run.info.run_id, job_name,
                    len(datasets), ", ".join(sorted(tags)) or "no tags")
        return True
    except Exception as err:  # noqa: BLE001 - a tracking server must never fail a training
        logger.warning("MLflow tracking at %s failed while recording the lineage of job %s (%s); the model is "
                       "published all the same", shown_uri(uri), job_name, _failure(err))
        return False


def lineage_link(run_tags: Mapping[str, str], record: Mapping[str, Any] | None = None) -> str | None:
    """The console's Lineage panel of the run's job (its DAG, run and map index tags; the record's DAG and run for a
    run without them); None when neither names them or no UI address can be built (no Airflow config)."""
    airflow = (record or {}).get("airflow") or {}
    dag_id = run_tags.get("training.dag_id") or airflow.get("dag_id")
    run_id = run_tags.get("training.run_id") or airflow.get("run_id")
    if not dag_id or not run_id:
        return None
    try:
        return lineage_view_url(dag_id, run_id, int(run_tags.get(MAP_INDEX_TAG) or -1))
    except Exception:  # noqa: BLE001 - no Airflow config (a unit test), a map index that is not a number
        return None


def version_lineage(run, *, job_name: str, model_uri: str) -> tuple[dict[str, str], str]:
    """A registered model version's tags and description from the job's MLflow run (its lineage tags, set by
    record_lineage, and its dataset inputs): the job, code digest, image and its digest, parent model, each channel's
    data version (training.data_version.<channel>), where the record is published and the link to the console's
    Lineage panel; the description says the same in Markdown, the link first (one click from the registry to what
    made the model). A run without lineage tags gives the job's name, the model and the link only (nothing is made
    up); no run: the job's name and the model."""
    tags = {JOB_TAG: job_name}
    lines = [f"`{model_uri}`, trained by job {job_name}"]
    if run is None:
        return tags, lines[0]
    run_tags = run.data.tags
    link = run_tags.get(LINEAGE_LINK_TAG) or lineage_link(run_tags)
    for key in (CODE_URI_TAG, CODE_DIGEST_TAG, IMAGE_TAG, IMAGE_DIGEST_TAG, PARENT_MODEL_TAG, LINEAGE_URI_TAG):
        if run_tags.get(key):
            tags[key] = run_tags[key]
    versions = {}
    for given in getattr(getattr(run, "inputs", None), "dataset_inputs", None) or []:
        input_tags = {t.key: t.value for t in given.tags}
        channel = input_tags.get("mlflow.data.context") or given.dataset.name
        versions[channel] = input_tags.get(DATA_VERSION_INPUT_TAG) or given.dataset.digest
    for channel, version in sorted(versions.items()):
        tags[metric_key(DATA_VERSION_TAG_PREFIX + channel)] = version
    if link:
        tags[LINEAGE_LINK_TAG] = link
        lines.append(f"Lineage (code, data, image, parent models): [{link}]({link})")
    facts = [("code", tags.get(CODE_DIGEST_TAG)), ("code source", tags.get(CODE_URI_TAG)),
             *((f"data {channel}", version) for channel, version in sorted(versions.items())),
             ("image", tags.get(IMAGE_TAG)), ("image digest", tags.get(IMAGE_DIGEST_TAG)),
             ("parent model", tags.get(PARENT_MODEL_TAG))]
    listed = "\n".join(f"- {what}: `{value}`" for what, value in facts if value)
    return {key: str(value)[:MAX_TAG_CHARS] for key, value in tags.items()}, "\n\n".join([*lines, listed] if listed
                                                                                        else lines)
