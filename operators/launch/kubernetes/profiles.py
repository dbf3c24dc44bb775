"""Kubernetes profiles: what weakens or moves a training pod's isolation is an admin's choice, never a spec's.

An admin defines profiles in airflow.cfg ([training.kubernetes] profiles, JSON: name -> fields below); the
[training.kubernetes] settings themselves are the profile `default`. A spec names one (`kubernetes.profile`) and may
not set the profile's fields itself: a namespace, a service account (its token), the workspace volume, the pod's and
container's security contexts and the uid are where a tenant's pod runs and what it may do. A spec that repeats the
profile's own value is accepted (nothing changes); any other value is refused with one line naming the field.
"""

from __future__ import annotations

from typing import Any, Mapping

from operators.launch.kubernetes.names import is_label_value
from operators.launch.kubernetes.settings import DATA_PLANES, DEFAULT_DATA_PLANE

PROFILE_FIELDS = ("namespace", "service_account", "workspace_pvc", "workspace_subpath", "run_as_user",
                  "security_context", "container_security_context")
# Where the job's bytes move and with which credentials (operators/launch/kubernetes/data_plane.py): a profile's
# only, a spec never names them.
DATA_PLANE_FIELDS = ("data_plane", "storage_secret", "data_plane_service_account", "data_plane_queue")
DEFAULT_PROFILE = "default"


class ProfileError(ValueError):
    """An option the profile decides: `key` names it, `problem` says what and what to do."""

    def __init__(self, key: str, problem: str):
        self.key, self.problem = key, problem
        super().__init__(f"kubernetes option '{key}' {problem}")


def _fail(key: str, problem: str, fix: str) -> ProfileError:
    return ProfileError(key, f"{problem}; {fix}")


def profiles(settings: Any) -> dict[str, dict[str, Any]]:
    """name -> the profile's fields, `default` (the settings) included; a bad setting is one line naming it."""
    default = {"namespace": settings.namespace, "service_account": settings.service_account,
               "workspace_pvc": settings.workspace_pvc, "workspace_subpath": "", "run_as_user": settings.run_as_user,
               "security_context": {}, "container_security_context": {},
               **{key: getattr(settings, key, "") for key in DATA_PLANE_FIELDS}}
    configured = getattr(settings, "profiles", None) or {}
    if not isinstance(configured, Mapping):
        raise ValueError("airflow.cfg [training.kubernetes] profiles must be a JSON object: name -> fields; fix it")
    result = {DEFAULT_PROFILE: default}
    for name, fields in configured.items():
        allowed = (*PROFILE_FIELDS, *DATA_PLANE_FIELDS)
        if not isinstance(fields, Mapping) or set(fields) - set(allowed):
            extra = sorted(set(fields) - set(allowed)) if isinstance(fields, Mapping) else []
            raise ValueError(f"airflow.cfg [training.kubernetes] profiles.{name} must be an object of "
                             f"{', '.join(allowed)}" + (f" (not {extra[0]!r})" if extra else "") + "; fix it")
        if fields.get("data_plane", DEFAULT_DATA_PLANE) not in DATA_PLANES:
            raise ValueError(f"airflow.cfg [training.kubernetes] profiles.{name}.data_plane is "
                             f"{fields['data_plane']!r}; use shared_volume or cluster")
        result[str(name)] = {**default, **dict(fields)}
    for name, fields in result.items():
        where = "" if name == DEFAULT_PROFILE else f"profiles.{name}."
        if fields["data_plane_service_account"] and fields["service_account"] == fields["data_plane_service_account"]:
            # A pod's service account (its token; on EKS / GKE its cloud role) reaches every container of the pod.
            raise ValueError(f"airflow.cfg [training.kubernetes] {where}service_account is "
                             f"{fields['service_account']!r}, the data plane's ({where}data_plane_service_account): the "
                             "training's own code would hold the platform's storage identity; give the training "
                             "another service account (or none)")
        queue = fields["data_plane_queue"] or ""
        if not isinstance(queue, str) or not is_label_value(queue):
            where = "data_plane_queue" if name == DEFAULT_PROFILE else f"profiles.{name}.data_plane_queue"
            raise ValueError(f"airflow.cfg [training.kubernetes] {where} is {queue!r}, not a LocalQueue name; fix it")
    return result


def profile_for(options: Mapping[str, Any], settings: Any) -> dict[str, Any]:
    """The fields of the profile the options name (`profile`, default `default`); an unknown name -> ValueError."""
    known = profiles(settings)
    name = options.get("profile") or DEFAULT_PROFILE
    if name not in known:
        raise _fail("profile", f"is {name!r}, not a profile of this Airflow",
                    f"use one of: {', '.join(sorted(known))} (airflow.cfg [training.kubernetes] profiles)")
    return known[name]


def check_spec_options(options: Mapping[str, Any], settings: Any) -> None:
    """Refuse a spec's kubernetes options that set a profile field to anything but the named profile's value."""
    profile = profile_for(options, settings)
    for key in PROFILE_FIELDS:
        value = options.get(key)
        if value is None or _same(key, value, profile[key]):
            continue
        raise _fail(key, f"is {value!r}, but the {options.get('profile') or DEFAULT_PROFILE!r} profile sets "
                    f"{profile[key]!r}", "leave it out, or name an admin-defined profile in kubernetes.profile "
                    f"(profiles: {', '.join(sorted(profiles(settings)))})")


def check_no_platform_secret(options: Mapping[str, Any], settings: Any) -> None:
    """Refuse a spec's env_from_secrets or secret_env naming the profile's storage Secret: the platform's storage
    credentials never reach the training container (operators/launch/kubernetes/data_plane.py)."""
    profile = profile_for(options, settings)
    secret = profile.get("storage_secret") or ""
    if not secret:
        return
    named = [("env_from_secrets", str(name)) for name in options.get("env_from_secrets") or []]
    for var, ref in (options.get("secret_env") or {}).items():
        named.append((f"secret_env.{var}", str(ref.get("name") if isinstance(ref, Mapping) else
                                               str(ref).split("/", 1)[0])))
    for key, name in named:
        if name == secret:
            raise _fail(key, f"names Secret {secret!r}, the platform's storage Secret (storage_secret of the "
                        f"{options.get('profile') or DEFAULT_PROFILE!r} profile), which never reaches the training",
                        "put the job's own credentials in a Secret of their own")


def _same(key: str, given: Any, configured: Any) -> bool:
    if key == "workspace_subpath":
        return str(given).strip("/") == str(configured or "").strip("/")
    if key == "run_as_user":
        return str(given) == str(configured)
    if isinstance(configured, Mapping):
        return isinstance(given, Mapping) and dict(given) == dict(configured)
    return str(given) == str(configured or "")
