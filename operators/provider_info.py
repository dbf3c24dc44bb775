"""The project as an Airflow provider: `get_provider_info` (the `apache_airflow_provider` entry point in
pyproject.toml), the way the amazon and cncf-kubernetes providers register. It documents the [training] config
sections (`airflow config list` shows them with these descriptions, and their defaults apply without an
airflow.cfg entry) and the extra links. The project defines no hook or connection type of its own: object storage
uses aws connections, the backends kubernetes and docker ones.
"""

from __future__ import annotations

from typing import Any

PACKAGE = "airflow-training-jobs"


def _option(description: str, default: str | None, kind: str = "string", example: str | None = None) -> dict:
    return {"description": description, "version_added": None, "type": kind, "example": example,
            "default": default}


TRAINING = {
    "workspace": _option("Shared workspace: jobs/<job_name>/ (job roots) and cache/ (prefetched channels). On "
                         "Kubernetes, the mount point of the ReadWriteMany volume shared by Airflow workers and "
                         "training pods. Empty: $AIRFLOW_HOME/workspace.", None),
    "default_backend": _option("Where a job runs when its spec does not say: local, kubernetes or docker.", "local"),
    "default_layout": _option("Directory layout inside the container when a spec does not say: ti, sagemaker, pai "
                              "or modelarts.", "ti"),
    "cache_max_bytes": _option("Size limit of the shared data cache (least-recently-used entries not in use are "
                               "evicted). 0 = unlimited.", "0", "integer", "53687091200"),
    "transfer_concurrency": _option("Parallel object-storage transfers across objects.", "16", "integer"),
    "multipart_threshold": _option("Objects above this size (bytes) are transferred in parts.", "8388608",
                                   "integer"),
    "multipart_chunksize": _option("Part size (bytes) of multipart transfers.", "8388608", "integer"),
    "checkpoint_sync_seconds": _option("Seconds between checkpoint syncs to checkpoint_path while training runs.",
                                       "60", "integer"),
    "retraining_configs": _option("Directory of retraining DAG configs (one DAG per YAML file); empty = "
                                  "dags/configs/ next to dags/retraining.py.", ""),
    "max_concurrent_trials": _option("Hyperparameter search: trials of one search training at once.", "2",
                                     "integer"),
    "trials_pool": _option("Hyperparameter search: an Airflow pool shared by all searches (create it first); "
                           "empty = none.", "", example="training_trials"),
    "artifact_links": _option("Artifact links of the UI for object storage: presigned (a short-lived https URL) or "
                              "console (the provider's web console).", "presigned"),
    "presigned_url_seconds": _option("Lifetime of presigned artifact links.", "900", "integer"),
    "default_image": _option("Training image used when a kubernetes/docker job does not name one.",
                             "training-base:latest"),
    "local_roots": _option("Local paths (plain or file://) a job spec may read or write, comma-separated; empty = "
                           "any path the worker can reach. Airflow's own files and the workspace are refused "
                           "regardless.", "", example="/srv/datasets,/srv/models"),
    "local_sandbox": _option("The local backend's sandbox for user code: bubblewrap (a mount and PID namespace "
                             "showing only the job root, its channels and the system read-only) or none.",
                             "bubblewrap"),
    "local_network": _option("The local sandbox's network: none (the job's own namespace, loopback only), "
                             "slirp4netns (outbound through Debian's slirp4netns, never the worker's loopback) or "
                             "host (the worker's network and its loopback services: weakens isolation).", "none",
                             example="slirp4netns"),
    "local_environment": _option("More names of the worker's environment that reach local user code, "
                                 "comma-separated, beyond the built-in allowlist.", "", example="WANDB_API_KEY"),
    "sdk_code_max_bytes": _option("Largest code archive (bytes) the SDK's staging endpoint accepts; larger uploads "
                                  "are refused (413): data belongs in input channels.", "67108864", "integer"),
    "sdk_code_quota_bytes": _option("Bytes of uploaded code one user may keep in the SDK's staging area (each user's "
                                    "uploads are their own: another user's are never a source_dir); over it an "
                                    "upload is refused (413).", "536870912", "integer"),
    "sdk_code_expiry_days": _option("Days after which a staged code archive its user did not upload again is removed "
                                    "(when that user uploads or lists their code, and by the workspace's garbage "
                                    "collection); an upload of the same code refreshes it; 0 = never.", "30",
                                    "float"),
    "secret_references": _option("JSON: DAG id pattern -> {connections, variables, kubernetes_secrets} -> name "
                                 "patterns the runs of those DAGs may reference in their spec (environment "
                                 "references, connections, docker secret_variables, kubernetes secret_env / "
                                 "env_from_secrets); empty = none (docs/security.md).", "", "string"),
    "local_lease_seconds": _option("How long a local training whose task process died keeps running, waiting for "
                                   "the task's retry to reattach to it, before it stops itself; above [scheduler] "
                                   "task_instance_heartbeat_timeout plus the launch task's retry delay.", "900",
                                   "float"),
    "local_uid_range": _option("FIRST-LAST: the uids local user code runs as when the worker is root, one per "
                               "running job (its job root is given to it); a range no account of the machine uses. "
                               "A non-root worker runs user code as its own uid.", "1200000000-1200009999"),
    "local_default_memory": _option("Memory per host of a local job whose spec gives no resources.memory (its "
                                    "cgroup's limit; over it the job ends oom_killed).", "8Gi"),
    "local_max_memory": _option("Most memory per host a local job may ask for (resources.memory above it is refused "
                                "in validate_spec); empty = no maximum.", "", example="64Gi"),
    "local_default_cpu": _option("CPUs per host of a local job whose spec gives no resources.cpu (a CFS quota).", "2"),
    "local_max_cpu": _option("Most CPUs per host a local job may ask for; empty = no maximum.", "", example="16"),
    "local_pids_limit": _option("Tasks (processes and threads) per host of a local job; a fork bomb stops there; "
                                "0 = no limit.", "4096", "integer"),
    "local_gpu_devices": _option("The GPU device nodes the local backend hands out, one job at a time each (a glob); "
                                 "a job sees only its own, numbered 0..n-1.", "/dev/nvidia[0-9]*"),
    "job_disk_limit": _option("The most a job root may hold on disk (allocated blocks, a file linked under several "
                              "names once), on every backend; a spec's resources.disk asks for less (more is refused "
                              "in validate_spec). Over it the job is stopped and fails disk_limit: the local backend's "
                              "kernel caps every file the job writes at it, and the launch task measures the job root "
                              "as the job runs (docs/operations.md). Empty = no cap.", "100Gi", example="20Gi"),
    "output_roots": _option("Per-user or per-team roots of outputs and checkpoints: comma-separated templates, each "
                            "with one {user} or {team}; when set, a spec's output_path and checkpoint_path lie under "
                            "its owner's root and reading under another owner's root needs a share (docs/security.md, "
                            "Ownership). Empty = no roots: the owner records beside the outputs still keep tenants "
                            "apart.", "", example="s3://models/{user}/, /srv/models/{team}/"),
    "teams": _option("The teams of output_roots' {team}: JSON {\"<team>\": [\"<user>\", ...]}; empty = none.", "",
                     example='{"vision": ["alice", "bob"]}'),
    "output_shares": _option("Who may read an owner's outputs besides it: JSON {\"<owner>\": [\"<reader>\", ...]}; an "
                             "owner is a user, dag:<dag_id> or team:<team>; a reader may be *; empty = none.", "",
                             example='{"dag:retrain_logistic_regression": ["*"]}'),
    "approver_role": _option("The auth manager's role whose users answer a retraining run's approval when its config "
                             "names no approvers (simple auth manager: viewer | user | op | admin, each with the rights "
                             "of those before it; FAB: the role of that name). The user who triggered a run never "
                             "answers its approval (docs/security.md).", "op", example="admin"),
    "retention_days": _option("Job roots and cache entries unused for this many days are removed; dead jobs' "
                              "cache pins released (0 = keep them).", "0", "float"),
    "max_active_runs": _option("training_job runs that run at once (the DAG's max_active_runs; more wait queued). "
                               "Raise [core] parallelism with it, on PostgreSQL: SQLite's writers deadlock under "
                               "many runs at once.", "4", "integer"),
    "mlflow_tracking_uri": _option("MLflow tracking server (http(s)://host:port): each training job is logged there as "
                                   "a run (params, metric history, tags, the model URI) and a retraining DAG's "
                                   "promotion registers a model version. A server that is down never fails a "
                                   "training. Credentials go in MLFLOW_TRACKING_USERNAME / _PASSWORD / _TOKEN of "
                                   "the workers' environment, not in the URI. Empty = no tracking.", "",
                                   example="http://mlflow.internal:5000"),
    "mlflow_experiment_prefix": _option("Admin fence for MLflow: when set, every experiment is <prefix><DAG id>/<base "
                                        "job name> (and a retraining's registered model the same with '.' for '/'), "
                                        "so a user who may trigger a DAG writes only under that DAG's experiments. "
                                        "Empty = the spec's base_job_name alone, which the triggering user chooses.",
                                        "", example="airflow/"),
}

KUBERNETES = {
    "conn_id": _option("Connection id of the cluster (kubernetes connection type); empty = in-cluster config or "
                       "KUBECONFIG.", "kubernetes_default"),
    "namespace": _option("Namespace of training Jobs.", "default"),
    "workspace_pvc": _option("ReadWriteMany claim holding the workspace, mounted by Airflow workers at [training] "
                             "workspace.", "training-workspace"),
    "service_account": _option("Service account of training pods; empty = the namespace default.", ""),
    "image_pull_policy": _option("Always, IfNotPresent or Never.", "IfNotPresent"),
    "image_pull_secrets": _option("Comma-separated Secret names for pulling training images.", ""),
    "priority_class": _option("PriorityClass of training pods.", ""),
    # Airflow formats provider defaults (str.format): no braces in them; empty means {} / [] here.
    "node_selector": _option("JSON object: node labels training pods must match; empty = {}.", "",
                             example='{"pool": "gpu"}'),
    "tolerations": _option("JSON list of tolerations of training pods; empty = [].", "",
                           example='[{"key": "gpu", "operator": "Exists"}]'),
    "keep_finished_jobs": _option("Keep finished Jobs for inspection instead of letting ttlSecondsAfterFinished "
                                  "remove them.", "False", "boolean"),
    "ttl_seconds_after_finished": _option("Seconds a finished Job is kept.", "600", "integer"),
    "run_as_user": _option("uid training containers run as.", "1000", "integer"),
    "deferrable": _option("Wait for training Jobs in the triggerer (no worker slot held).", "True", "boolean"),
    "profiles": _option("JSON object: profile name -> namespace, service_account, workspace_pvc, workspace_subpath, "
                        "run_as_user, security_context, container_security_context (what weakens or moves "
                        "isolation). A spec picks one with kubernetes.profile and may not set those fields itself; "
                        "the settings above are the profile 'default'. Empty = only 'default'.", "",
                        example='{"team-a": ' + '{"namespace": "team-a", "service_account": "trainer"}}'),
    "queue": _option("Kueue LocalQueue (in the job's namespace) every training Job goes to: created suspended and "
                     "admitted whole by Kueue against its ClusterQueue's quota. Empty = Kueue is not used.", "",
                     example="team-a"),
    "queues": _option("Comma-separated LocalQueues a spec's kubernetes.queue may pick besides the default queue.", "",
                      example="team-a,team-b"),
    "queue_priority": _option("Kueue WorkloadPriorityClass of training Jobs (who preempts whom); empty = the "
                              "queue's default.", "", example="low"),
    "queue_priorities": _option("Comma-separated WorkloadPriorityClasses a spec's kubernetes.queue_priority may "
                                "pick besides the default.", "", example="low,high"),
    "data_plane": _option("Where a job's bytes move: cluster (platform pods in the training namespace stage, prefetch, "
                          "restore, sync checkpoints and upload; the worker mounts nothing) or shared_volume (the "
                          "Airflow workers mount workspace_pvc at [training] workspace). A profile may set it.",
                          "cluster", example="shared_volume"),
    "data_plane_image": _option("The platform's image the in-cluster steps run (data_plane = cluster).",
                                "training-airflow:latest", example="registry.example.com/training-airflow:3.3.2"),
    "storage_secret": _option("Secret in the training namespace whose keys are AIRFLOW_CONN_<ID>: the connections "
                              "the in-cluster steps use (never the training container). Empty = the steps' own "
                              "identity (data_plane_service_account). A profile may set it.", "",
                              example="training-storage"),
    "data_plane_service_account": _option("Service account of the in-cluster steps (workload identity: IRSA, GKE "
                                          "Workload Identity); empty = none. A profile may set it.", ""),
    "data_plane_queue": _option("Kueue LocalQueue of the in-cluster steps' Jobs, where Kueue manages every Job of the "
                                "namespace (manageJobsWithoutQueueName; a LocalQueue of a small CPU quota keeps them "
                                "from waiting behind training); empty = none. A profile may set it.", "",
                                example="data-plane"),
    "data_plane_uid": _option("The uid the in-cluster steps run as (the Airflow image's user); never the "
                              "training's.", "50000"),
    "data_plane_workspace": _option("Where the platform pods mount the workspace volume (data_plane = cluster): "
                                    "every path of such a job, whatever [training] workspace the Airflow workers "
                                    "have.", "/workspace"),
    "workspace_group": _option("The group the in-cluster steps and the training pods share on the cluster's "
                               "workspace volume (fsGroup): its root must be writable by it.", "1000"),
}

DOCKER = {
    "docker_conn_id": _option("Docker connection id for registry login; empty = none.", ""),
    "docker_url": _option("The Docker engine.", "unix://var/run/docker.sock"),
    "host_workspace": _option("The workspace's path on the Docker engine's host, when the worker sees it elsewhere "
                              "(a worker in a container); empty = the same path. An admin setting: a job cannot "
                              "choose what the engine bind-mounts.", ""),
    "pids_limit": _option("Processes and threads each training container may hold (Docker PidsLimit: a fork bomb "
                          "stops there); 0 = no limit.", "4096", "integer"),
}


# operators.stages.links.ALL_LINKS, by name: importing them here would load the Task SDK with the provider's info.
EXTRA_LINKS = ("TrainingJobLink", "ModelArtifactsLink", "MetricsLink", "FailureReasonLink", "HostLogsLink")


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": PACKAGE,
        "name": "Training jobs",
        "description": "Airflow-native training jobs (TI-ONE, PAI, SageMaker and ModelArts contracts) on local "
                       "processes, Docker or Kubernetes.",
        "versions": ["0.1.0"],
        "extra-links": [f"operators.stages.links.{name}" for name in EXTRA_LINKS],
        "config": {
            "training": {"description": "Training jobs: workspace, defaults of job specs, transfers, search.",
                         "options": TRAINING},
            "training.kubernetes": {"description": "Training jobs on the kubernetes backend.",
                                    "options": KUBERNETES},
            "training.docker": {"description": "Training jobs on the docker backend.", "options": DOCKER},
        },
    }
