"""The one home of a job's output layout in object storage (or a local output_path): every writer (the upload stage,
the SDK's local mode, a retraining DAG's promotion, a search's summary) and every reader (restore's resume_from, the
console, the SDK) spells it through these functions.

    <output_path>/<job_name>/output/model.tar.gz      the model (after success only)
    <output_path>/<job_name>/output/output.tar.gz     output/data/, when the job wrote any
    <output_path>/<job_name>/output/failure           why the training did not succeed (after failure only)
    <output_path>/<job_name>/output/metrics.json      the matched metric series
    <output_path>/<job_name>/output/lineage.json      what made the run's model (operators/lineage/record.py)
    <output_path>/<base_job_name>/latest.json         a retraining lineage's "latest model" pointer
    <output_path>/<search job>/search_summary.json    a hyperparameter search's summary

No imports: the bottom layer of operators/ (the console and the SDK read it too)."""

from __future__ import annotations

MODEL = "model.tar.gz"
OUTPUT_ARCHIVE = "output.tar.gz"
FAILURE = "failure"
METRICS = "metrics.json"
LINEAGE = "lineage.json"
ARTIFACT_NAMES = (MODEL, OUTPUT_ARCHIVE, FAILURE, METRICS, LINEAGE)
STALE_AFTER_A_RUN = ARTIFACT_NAMES  # what a new run of the same job replaces (the SDK's local mode clears them)

OUTPUT_DIR = "output"
# A job's model, relative to its job area <output_path>/<job_name>/.
MODEL_IN_JOB_AREA = f"{OUTPUT_DIR}/{MODEL}"
LATEST_POINTER = "latest.json"
SEARCH_SUMMARY = "search_summary.json"


def job_output_uri(output_path: str, job_name: str) -> str:
    """`<output_path>/<job_name>/output/`: where the job's artifacts go (ends with /)."""
    return f"{str(output_path).rstrip('/')}/{job_name}/{OUTPUT_DIR}/"


def artifact_uri(output_path: str, job_name: str, name: str) -> str:
    """One of ARTIFACT_NAMES of the job."""
    if name not in ARTIFACT_NAMES:
        raise ValueError(f"{name!r} is not one of a job's artifacts ({', '.join(ARTIFACT_NAMES)})")
    return job_output_uri(output_path, job_name) + name


def model_uri(output_path: str, job_name: str) -> str:
    return artifact_uri(output_path, job_name, MODEL)


def job_of_model_uri(uri: str | None) -> str | None:
    """The job name a model URI `<output_path>/<job_name>/output/model.tar.gz` names, else None."""
    suffix = "/" + MODEL_IN_JOB_AREA
    if not uri or not uri.endswith(suffix):
        return None
    return uri[: -len(suffix)].rstrip("/").rpartition("/")[2] or None


def is_model_uri(uri: str | None) -> bool:
    return job_of_model_uri(uri) is not None


def latest_pointer_uri(output_path: str, base_job_name: str) -> str:
    """A retraining lineage's "latest model" pointer (operators/pipelines/retraining.py)."""
    return f"{str(output_path).rstrip('/')}/{base_job_name}/{LATEST_POINTER}"


def search_summary_uri(output_path: str, search_job: str) -> str:
    """A hyperparameter search's summary (operators/pipelines/search.py)."""
    return f"{str(output_path).rstrip('/')}/{search_job}/{SEARCH_SUMMARY}"
