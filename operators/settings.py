"""The [training] sections of airflow.cfg (overridable by AIRFLOW__TRAINING__<KEY> variables): the typed getters every
reader of them uses, and the [training] section itself (TrainingSettings). In a data-plane step (operators/
step_process.py) they read the AIRFLOW__TRAINING*__<KEY> variables alone, without Airflow (EnvironmentConfig). Each backend reads its own section in its
folder with these getters ([training.kubernetes]: operators/launch/kubernetes/settings.py, [training.docker]:
operators/launch/docker/settings.py); everything else takes the settings objects they return."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from operators.quantities import is_quantity
from operators.step_process import is_step_process


class EnvironmentConfig:
    """Airflow's conf as a data-plane step has it (operators/step_process.py): only its AIRFLOW__<SECTION>__<KEY>
    variables (the worker passes every [training] setting so: training_settings_env), read as Airflow reads them
    (the section's '.' as '_', the value's $VARIABLES and ~ expanded; getint, getfloat, getboolean and getjson's
    rules), without importing Airflow (~2 s of a step's life). Errors are ValueError; the getters below word them."""

    def __init__(self, environ=None) -> None:
        self._environ = os.environ if environ is None else environ

    @staticmethod
    def env_name(section: str, key: str) -> str:
        return f"AIRFLOW__{section.replace('.', '_').upper()}__{key.upper()}"

    def get(self, section: str, key: str, fallback: Any = None) -> Any:
        value = self._environ.get(self.env_name(section, key))
        if value is None:
            return fallback
        while True:  # Airflow's expand_env_var: until nothing changes
            expanded = os.path.expanduser(os.path.expandvars(value))
            if expanded == value:
                return value
            value = expanded

    def getint(self, section: str, key: str, fallback: Any = None) -> int:
        value = self.get(section, key, fallback)
        try:
            return int(value)
        except (TypeError, ValueError):
            number = float(value)  # "2.0" is 2, as Airflow has it; "2.5" is refused
            if number != int(number):
                raise ValueError(value) from None
            return int(number)

    def getfloat(self, section: str, key: str, fallback: Any = None) -> float:
        return float(self.get(section, key, fallback))

    def getboolean(self, section: str, key: str, fallback: Any = None) -> bool:
        value = str(self.get(section, key, fallback)).lower().strip().split("#")[0].strip()
        if value in ("t", "true", "1"):
            return True
        if value in ("f", "false", "0"):
            return False
        raise ValueError(value)

    def getjson(self, section: str, key: str, fallback: Any = None) -> Any:
        value = self.get(section, key, None)
        return fallback if value in (None, "") else json.loads(value)

    def getsection(self, section: str) -> dict[str, str]:
        prefix = self.env_name(section, "")
        return {name[len(prefix):].lower(): self.get(section, name[len(prefix):]) for name in self._environ
                if name.startswith(prefix) and not name.endswith(("_CMD", "_SECRET"))}


def _conf():
    if is_step_process():
        return EnvironmentConfig()
    # lazy: Airflow, which settings (below launch/) never imports at module level
    from airflow.configuration import conf

    return conf


def get_str(section: str, key: str, fallback: str) -> str:
    value = _conf().get(section, key, fallback=fallback)
    return fallback if value is None else str(value)


# Airflow's own getters (getjson, getint, getfloat, getboolean: the AIRFLOW__<SECTION>__<KEY> variables and secrets
# backends come with them); an empty value means the default, and a bad one is one line naming the setting.
def _typed(getter: str, what: str, section: str, key: str, fallback: Any) -> Any:
    if not get_str(section, key, "").strip():
        return fallback
    try:
        return getattr(_conf(), getter)(section, key, fallback=fallback)
    except Exception:  # AirflowConfigException, whose message repeats the raw value
        raw = get_str(section, key, "")
        raise ValueError(f"airflow.cfg [{section}] {key} must be {what}, got {raw!r}; fix the setting") from None


def get_json(section: str, key: str, fallback: Any) -> Any:
    return _typed("getjson", "valid JSON", section, key, fallback)


def get_int(section: str, key: str, fallback: int, minimum: int | None = None) -> int:
    what = "an integer" + (f" >= {minimum}" if minimum is not None else "")
    value = _typed("getint", what, section, key, fallback)
    if minimum is not None and value < minimum:
        raise ValueError(f"airflow.cfg [{section}] {key} must be {what}, got {get_str(section, key, '')!r}")
    return value


def get_bool(section: str, key: str, fallback: bool) -> bool:
    return _typed("getboolean", "true or false", section, key, fallback)


def get_list(section: str, key: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in get_str(section, key, "").split(",") if x.strip())


def get_float(section: str, key: str, fallback: float) -> float:
    value = _typed("getfloat", "a number >= 0", section, key, fallback)
    if value < 0:
        raise ValueError(f"airflow.cfg [{section}] {key} must be a number >= 0, got {get_str(section, key, '')!r}")
    return value


def get_choice(section: str, key: str, fallback: str, choices: tuple[str, ...]) -> str:
    value = get_str(section, key, fallback).strip() or fallback
    if value not in choices:
        raise ValueError(f"airflow.cfg [{section}] {key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _uid_range(section: str, key: str, fallback: tuple[int, int]) -> tuple[int, int]:
    raw = get_str(section, key, "").strip()
    if not raw:
        return fallback
    first, _, last = raw.partition("-")
    if not (first.strip().isdigit() and last.strip().isdigit()) or not 0 < int(first) <= int(last) < 2**31 - 1:
        raise ValueError(f"airflow.cfg [{section}] {key} must be FIRST-LAST, two uids > 0 (e.g. 1200000000-1200009999),"
                         f" got {raw!r}; fix the setting")
    return int(first), int(last)


def _quantity_setting(section: str, key: str, fallback: str) -> str:
    raw = get_str(section, key, fallback).strip()
    if raw and not is_quantity(raw):
        raise ValueError(f"airflow.cfg [{section}] {key} must be a quantity like 8Gi or 2, got {raw!r}; fix the setting")
    return raw


_PLAIN_USER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


def user_dir_name(user: str) -> str:
    """A directory name for a user name (their part of the SDK's code staging area, operators/staging/sdk_uploads.py):
    the name itself when it is plain, else a digest (never '..', '/', '')."""
    if _PLAIN_USER.match(user) and user not in (".", ".."):
        return user
    return "u-" + hashlib.sha256(user.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class TrainingSettings:
    workspace: str
    default_backend: str = "local"
    default_layout: str = "ti"
    cache_max_bytes: int = 0
    transfer_concurrency: int = 16
    multipart_threshold: int = 8 * 1024 * 1024
    multipart_chunksize: int = 8 * 1024 * 1024
    checkpoint_sync_seconds: int = 60
    default_image: str = "training-base:latest"
    retraining_configs: str = ""  # directory of retraining DAG configs; "" = the DAG file's default
    max_concurrent_trials: int = 2  # hyperparameter search: trials of one search training at once
    trials_pool: str = ""  # an Airflow pool shared by all searches ("" = none)
    local_roots: tuple[str, ...] = ()  # local paths a spec may use; () = anywhere the worker can reach
    local_sandbox: str = "bubblewrap"  # the local backend's sandbox: bubblewrap | none
    local_environment: tuple[str, ...] = ()  # more names of the worker's environment that reach local user code
    local_lease_seconds: float = 900.0  # a local training whose launcher died waits this long for a retry to reattach
    # The local sandbox's network (operators/launch/local/network.py): none = loopback only (the job's own),
    # slirp4netns = outbound too, never the worker's loopback; host = the worker's network (weakens isolation).
    local_network: str = "none"
    # Who user code runs as on a root worker, and what it may take (operators/launch/local/limits.py): a uid of this
    # range per running job; per host a cgroup with these defaults for a spec that gives none, these maxima for one
    # that gives more (refused in validate_spec), and this many tasks; the GPU device nodes to hand out.
    local_uid_range: tuple[int, int] = (1_200_000_000, 1_200_009_999)
    local_default_memory: str = "8Gi"
    local_max_memory: str = ""  # "" = no maximum
    local_default_cpu: str = "2"
    local_max_cpu: str = ""
    local_pids_limit: int = 4096
    local_gpu_devices: str = "/dev/nvidia[0-9]*"
    # The most a job root may hold (a quantity; "" = no cap): a spec's resources.disk within it (launch/disk_cap.py).
    job_disk_limit: str = "100Gi"
    retention_days: float = 0  # job roots and cache entries unused this long are removed (0 = keep)
    artifact_links: str = "presigned"  # the UI's object-storage artifact links: presigned | console
    presigned_url_seconds: int = 900
    max_active_runs: int = 4  # training_job runs at once (its DAG's max_active_runs); more wait in the queue

    @property
    def jobs_dir(self) -> str:
        return os.path.join(self.workspace, "jobs")

    @property
    def cache_dir(self) -> str:
        return os.path.join(self.workspace, "cache")

    @property
    def code_staging_dir(self) -> str:
        """Where the SDK's code uploads land (plugins/training_sdk_api.py): content-addressed archives."""
        return os.path.join(self.workspace, "staging", "code")

    @property
    def models_dir(self) -> str:
        """The SDK's default output_path when its code went through the workspace."""
        return os.path.join(self.workspace, "models")

    def user_code_dir(self, user: str) -> str:
        """Where one user's SDK code uploads land: no user can name another's as a source_dir."""
        return os.path.join(self.code_staging_dir, user_dir_name(user))

    @property
    def platform_areas(self) -> dict[str, tuple[str, ...]]:
        """Workspace directories a spec may name, and for which fields (operators.jobspec.local_paths); an area with no
        fields is the platform's and refused for every field (the staging area of other users' code)."""
        return {self.code_staging_dir: (), self.models_dir: ("output_path", "resume_from")}

    def platform_areas_for(self, user: str | None) -> dict[str, tuple[str, ...]]:
        """platform_areas plus the triggering user's own uploaded code (none when the run has no triggering user:
        a scheduled run names code in object storage or under [training] local_roots)."""
        areas = dict(self.platform_areas)
        if user:
            areas[self.user_code_dir(user)] = ("source_dir",)
        return areas

    def job_root(self, job_name: str) -> str:
        return os.path.join(self.jobs_dir, job_name)


def training_settings() -> TrainingSettings:
    s = "training"
    home = os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))
    return TrainingSettings(
        workspace=os.path.abspath(get_str(s, "workspace", os.path.join(home, "workspace"))),
        default_backend=get_str(s, "default_backend", "local"),
        default_layout=get_str(s, "default_layout", "ti"),
        cache_max_bytes=get_int(s, "cache_max_bytes", 0),
        transfer_concurrency=get_int(s, "transfer_concurrency", 16),
        multipart_threshold=get_int(s, "multipart_threshold", 8 * 1024 * 1024),
        multipart_chunksize=get_int(s, "multipart_chunksize", 8 * 1024 * 1024),
        checkpoint_sync_seconds=get_int(s, "checkpoint_sync_seconds", 60),
        default_image=get_str(s, "default_image", "training-base:latest"),
        retraining_configs=get_str(s, "retraining_configs", "").strip(),
        max_concurrent_trials=get_int(s, "max_concurrent_trials", 2, minimum=1),
        trials_pool=get_str(s, "trials_pool", "").strip(),
        local_roots=tuple(os.path.abspath(r.strip()) for r in get_str(s, "local_roots", "").split(",") if r.strip()),
        local_sandbox=get_choice(s, "local_sandbox", "bubblewrap", ("bubblewrap", "none")),
        local_environment=get_list(s, "local_environment"),
        local_lease_seconds=get_float(s, "local_lease_seconds", 900.0),
        local_network=get_choice(s, "local_network", "none", ("none", "slirp4netns", "host")),
        local_uid_range=_uid_range(s, "local_uid_range", TrainingSettings.local_uid_range),
        local_default_memory=_quantity_setting(s, "local_default_memory", TrainingSettings.local_default_memory),
        local_max_memory=_quantity_setting(s, "local_max_memory", ""),
        local_default_cpu=_quantity_setting(s, "local_default_cpu", TrainingSettings.local_default_cpu),
        local_max_cpu=_quantity_setting(s, "local_max_cpu", ""),
        local_pids_limit=get_int(s, "local_pids_limit", 4096, minimum=0),
        local_gpu_devices=get_str(s, "local_gpu_devices", TrainingSettings.local_gpu_devices).strip(),
        job_disk_limit=_quantity_setting(s, "job_disk_limit", TrainingSettings.job_disk_limit),
        retention_days=get_float(s, "retention_days", 0.0),
        artifact_links=get_choice(s, "artifact_links", "presigned", ("presigned", "console")),
        presigned_url_seconds=get_int(s, "presigned_url_seconds", 900, minimum=1),
        max_active_runs=get_int(s, "max_active_runs", 4, minimum=1),
    )


def training_settings_env(workspace: str) -> dict[str, str]:
    """The [training] settings as the environment of a platform pod in the cluster (AIRFLOW__TRAINING__<KEY>), so its
    training_settings() are the worker's but for the workspace, which is where the pod mounts it: admin settings, no
    secret among them (connections reach those pods through the storage Secret, operators/launch/kubernetes/
    data_plane.py)."""
    section = _conf().getsection("training") or {}
    env = {f"AIRFLOW__TRAINING__{key.upper()}": str(value) for key, value in section.items()}
    env["AIRFLOW__TRAINING__WORKSPACE"] = workspace
    return env


def sdk_code_max_bytes() -> int:
    """[training] sdk_code_max_bytes: the largest code archive the SDK's staging endpoint accepts (64 MiB)."""
    return get_int("training", "sdk_code_max_bytes", 64 * 1024 * 1024, minimum=1)


def secret_references() -> Any:
    """[training] secret_references: the JSON policy of which Airflow connections, Variables and Kubernetes Secrets
    the runs of which DAGs may reference (parsed and applied by operators/jobspec/secret_policy.py); empty = none."""
    return get_json("training", "secret_references", {})


def sdk_code_quota_bytes() -> int:
    """[training] sdk_code_quota_bytes: how many bytes of uploaded code one user may keep in the staging area
    (512 MiB)."""
    return get_int("training", "sdk_code_quota_bytes", 512 * 1024 * 1024, minimum=1)


def sdk_code_expiry_days() -> float:
    """[training] sdk_code_expiry_days: a user's staged code archive not uploaded again for this many days is removed
    (when that user uploads or lists, and by the workspace's garbage collection); 0 = never (30)."""
    return get_float("training", "sdk_code_expiry_days", 30.0)


def ownership_settings() -> tuple[str, Any, Any]:
    """The admin's ownership settings (applied by operators/jobspec/ownership.py): [training] output_roots (comma-
    separated templates with {user} or {team}: `s3://models/{user}/, /srv/models/{team}/`; empty = no roots),
    [training] teams (JSON {"<team>": ["<user>", ...]}) and [training] output_shares (JSON {"<owner>": ["<reader>",
    ...]}: who may read an owner's outputs besides it; an owner is a user, `dag:<dag_id>` or `team:<team>`)."""
    return (get_str("training", "output_roots", ""), get_json("training", "teams", {}),
            get_json("training", "output_shares", {}))


def mlflow_tracking_uri() -> str:
    """[training] mlflow_tracking_uri: the MLflow tracking server each training job is logged to as a run
    (operators/tracking/mlflow.py); empty = no tracking."""
    return get_str("training", "mlflow_tracking_uri", "").strip()


def mlflow_experiment_prefix() -> str:
    """[training] mlflow_experiment_prefix: when set, every job's MLflow experiment is
    `<prefix><DAG id>/<base job name>` (operators/tracking/mlflow.py), so whoever triggers a DAG writes only under
    that DAG's experiments; empty = the base job name alone, as the triggering user chose it."""
    return get_str("training", "mlflow_experiment_prefix", "").strip()


def approver_role() -> str:
    """[training] approver_role: the auth manager's role whose users may answer a retraining run's approval when its
    config names no approvers (op: with the simple auth manager, Op and Admin users); the user who triggered the run
    never may (operators/pipelines/approval.py, plugins/approval_check.py)."""
    return get_str("training", "approver_role", "op").strip() or "op"
