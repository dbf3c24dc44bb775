"""The trigger form of a training DAG: one Param per job spec key, with a JSON schema each.

The same schema validates `airflow dags trigger --conf`, the REST API and the UI form; `validate_spec` then checks what a
JSON schema cannot (name clashes, URI schemes, regexes) and names the field.
"""

from __future__ import annotations

from typing import Any, Mapping

from operators.spec import BACKENDS, DISTRIBUTIONS, LAYOUTS

_URI = "object storage URI (s3://, cos://, oss://, obs://) or a local path"


def training_job_params(defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Params for a training DAG; `defaults` pre-fills the form (e.g. the shipped example)."""
    from airflow.sdk import Param

    d = dict(defaults or {})

    def p(name, default, description, section, **schema):
        value = d.get(name, default)
        if value is None and "null" not in schema.get("type", ()):
            return Param(description=description, section=section, **schema)  # required: no default
        return Param(value, description=description, section=section, **schema)

    job, code, data, run = "Job", "Code", "Data", "Resources"
    nullable_str = ["null", "string"]
    return {
        "job_name": p("job_name", None, "DNS-1123 name; the idempotency key (artifacts go to <output_path>/<job_name>/). "
                      "Empty: <base_job_name>-<run time>.", job, type=nullable_str, maxLength=63,
                      pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        "base_job_name": p("base_job_name", None, "Prefix of derived job names; resume_from 'latest' searches it. "
                           "Empty: the DAG id.", job, type=nullable_str, maxLength=50),
        "source_dir": p("source_dir", None, f"Training code: a prefix, a .tar.gz object, a local dir or a local "
                        f".tar.gz ({_URI}).", code, type="string", minLength=1),
        "entry_point": p("entry_point", None, "A .py or .sh file in source_dir; hyperparameters are passed as "
                         "--name value.", code, type=nullable_str),
        "command": p("command", None, "Instead of entry_point: a shell command run in the code dir, e.g. "
                     "'python train.py $PAI_USER_ARGS' (no implicit arguments).", code, type=nullable_str),
        "hyperparameters": p("hyperparameters", {}, "name -> value (JSON scalars).", code, type="object"),
        "inputs": p("inputs", {}, f"channel -> {_URI}; a prefix ending in / or a single object.", data, type="object"),
        "output_path": p("output_path", None, f"Artifacts go to <output_path>/<job_name>/output/ ({_URI}).", data,
                         type="string", minLength=1),
        "checkpoint_path": p("checkpoint_path", None, "Synced with the checkpoint dir during training, restored "
                             "before it.", data, type=nullable_str),
        "resume_from": p("resume_from", None, "Incremental training: 'latest' (newest successful model of "
                         "base_job_name) or the URI of a model.tar.gz; given as input channel 'model'.", data,
                         type=nullable_str),
        "instance_count": p("instance_count", 1, "Hosts.", run, type="integer", minimum=1),
        "processes_per_host": p("processes_per_host", 1, "Processes per host (torchrun when > 1).", run,
                                type="integer", minimum=1),
        "distribution": p("distribution", None, "Launcher environment for several hosts.", run,
                          type=["null", "string"], enum=[None, *DISTRIBUTIONS]),
        "resources": p("resources", {}, "Per host: cpu (e.g. 2 or 500m), memory (e.g. 4Gi), gpu (count).", run,
                       type="object"),
        "backend": p("backend", None, "Where it runs; empty: airflow.cfg [training] default_backend.", run,
                     type=["null", "string"], enum=[None, *BACKENDS]),
        "image_uri": p("image_uri", None, "Training image (kubernetes, docker).", run, type=nullable_str),
        "layout": p("layout", None, "Directory layout inside the container; empty: [training] default_layout.", run,
                    type=["null", "string"], enum=[None, *LAYOUTS]),
        "max_run_seconds": p("max_run_seconds", 86400, "Hard limit; the job is stopped and the task fails.", run,
                             type="integer", minimum=1),
        "environment": p("environment", {}, "Extra environment variables for the training script.", run,
                         type="object"),
        "connections": p("connections", {}, "URI scheme -> Airflow connection id (defaults aws_default, "
                         "cos_default, oss_default, obs_default).", data, type="object"),
        "metric_definitions": p("metric_definitions", [], 'Metrics read from the log: [{"Name": "loss", '
                                '"Regex": "loss=([0-9.]+)"}].', job, type="array"),
        "kubernetes": p("kubernetes", {}, "Per-job Kubernetes options: namespace, node_selector, tolerations, "
                        "priority_class, service_account, image_pull_policy, image_pull_secrets.", run, type="object"),
    }
