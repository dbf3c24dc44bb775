"""S3 clients for Airflow connections: one ready boto3 client per connection id, and what errors need to know.

Credentials and the boto3 session come from the amazon provider's AwsBaseHook, so everything Airflow supports
for AWS connections works (login/password, profiles, assume-role, AIRFLOW_CONN_<ID> variables, secrets
backends). The connection extra carries `endpoint_url`, `region_name` (or `region`) and `addressing_style`
("path" / "virtual"); a `config_kwargs` dict in the extra is merged over our botocore defaults.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from operators.storage.errors import StorageError, display_endpoint
from operators.storage.location import DEFAULT_CONNECTIONS, StorageLocation
from operators.storage.retries import REQUEST_RETRIES, install

log = logging.getLogger("operators.storage.hook")

_AWS_HOST_SUFFIXES = (".amazonaws.com", ".amazonaws.com.cn", ".api.aws")

def _utc():
    """botocore's UTC tzinfo (dateutil's tzutc), so our datetimes are the ones botocore would have made."""
    from dateutil.tz import tzutc

    return tzutc()


# Timeouts that keep an unreachable endpoint from hanging a task for minutes; the retries that ride out a flaky
# network and a store shedding load are in storage.retries.
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60


@dataclass(frozen=True)
class EngineSettings:
    """What another transfer engine (storage.obstore_downloads) needs to reach a bucket as this client does."""

    endpoint: str  # scheme://host[:port], the bucket's host when `virtual_hosted`
    region: str | None
    virtual_hosted: bool
    credentials: Any  # botocore Credentials (refreshable), or None for unsigned requests
    verify: Any  # the connection's TLS verification: True, False or a CA bundle path
    proxies: Any
    max_retries: int  # retries per request: ours (REQUEST_RETRIES) or the connection's config_kwargs


@dataclass
class Remote:
    """A ready boto3 S3 client for one connection, and what error messages need to say about it."""

    client: Any
    conn_id: str
    endpoint: str | None
    is_aws: bool = True

    def engine_settings(self, bucket: str) -> EngineSettings:
        """The endpoint, addressing style, region and credentials botocore uses for `bucket`.

        The URL comes from botocore itself (a presigned GET: no request is sent), so the host and the
        addressing style are the ones its endpoint rules chose from the connection (virtual-hosted for AWS and
        for `addressing_style: virtual`, path style for IP endpoints and `addressing_style: path`)."""
        client = self.client
        credentials = getattr(getattr(client, "_request_signer", None), "_credentials", None)
        if credentials is not None:
            url = client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=60)
        else:
            url = client.meta.endpoint_url + f"/{bucket}/k"
        parts = urlsplit(url)
        virtual = (parts.hostname or "").lower().startswith(bucket.lower() + ".")
        session = getattr(getattr(client, "_endpoint", None), "http_session", None)
        return EngineSettings(
            endpoint=f"{parts.scheme}://{parts.netloc}",
            region=client.meta.region_name,
            virtual_hosted=virtual,
            credentials=credentials,
            verify=getattr(session, "_verify", True),
            proxies=client.meta.config.proxies,
            max_retries=_max_retries(client.meta.config.retries),
        )


def _max_retries(retries: dict | None) -> int:
    """botocore's retry setting as a count of retries: `total_max_attempts` counts the first attempt too."""
    retries = retries or {}
    if retries.get("total_max_attempts") is not None:
        return max(0, int(retries["total_max_attempts"]) - 1)
    return max(0, int(retries.get("max_attempts", REQUEST_RETRIES)))


def is_aws_endpoint(endpoint: str | None) -> bool:
    if not endpoint:
        return True
    host = (urlsplit(endpoint).hostname or "").lower()
    return host.endswith(_AWS_HOST_SUFFIXES)


def fast_timestamp(value: Any):
    """botocore's timestamp parser, minus dateutil for the two formats S3 sends (same aware UTC datetimes).

    botocore parses every timestamp with dateutil (~40 us each): a listing of 10,000 objects spent ~0.4 s of CPU
    on its LastModified values alone, a third of a warm cache check. ISO 8601 with 'Z' (listings) and RFC 1123
    with 'GMT' (headers) go through the standard library (~1-3 us); anything else through botocore as before.
    """
    if isinstance(value, str):
        try:
            if value.endswith("Z") and "T" in value:
                return datetime.fromisoformat(value[:-1]).replace(tzinfo=_utc())
            if value.endswith(" GMT"):
                return parsedate_to_datetime(value).replace(tzinfo=_utc())
        except (TypeError, ValueError):
            pass
    from botocore.utils import parse_timestamp

    return parse_timestamp(value)


_shared_loader = None  # botocore's data loader of the first session of this process, with its caches
_shared_loader_lock = threading.Lock()


def share_data_loader(botocore_session) -> None:
    """Make `botocore_session` read botocore's JSON data (the S3 service model, endpoint rules: ~0.3 s of CPU, two
    thirds of a warm cache check) through the loader of the first session of this process, which has it parsed
    already. Each AwsBaseHook builds a fresh session, and a long-lived process builds many: the API server one per
    artifact link, a task one per hook."""
    global _shared_loader
    with _shared_loader_lock:
        if _shared_loader is None:
            _shared_loader = botocore_session.get_component("data_loader")
        else:
            botocore_session.register_component("data_loader", _shared_loader)


def forget_data_loader() -> None:
    """The next session parses botocore's data again, as the first session of a fresh process does (benchmarks)."""
    global _shared_loader
    with _shared_loader_lock:
        _shared_loader = None


def _aws_hook_class():
    """AwsBaseHook whose sessions parse timestamps with `fast_timestamp` (everything else is the provider's)."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    class StorageAwsHook(AwsBaseHook):
        def get_session(self, *args, **kwargs):
            session = super().get_session(*args, **kwargs)
            botocore_session = getattr(session, "_session", None)  # boto3 keeps its botocore session here
            try:
                factory = botocore_session.get_component("response_parser_factory")
                factory.set_parser_defaults(timestamp_parser=fast_timestamp)
                share_data_loader(botocore_session)
            except Exception:  # noqa: BLE001 - optimisations only: botocore's parser and loader work as well
                log.debug("could not install the fast timestamp parser or the shared data loader", exc_info=True)
            return session

    return StorageAwsHook


def make_remote(loc: StorageLocation, conn_id: str, concurrency: int) -> Remote:
    """Build the S3 client of connection `conn_id` (used for `loc`, which error messages name)."""
    from botocore.config import Config

    aws = _aws_hook_class()(aws_conn_id=conn_id, client_type="s3")
    try:
        wrapper = aws.conn_config
    except Exception as err:  # noqa: BLE001 - a malformed connection; its text may hold the secret
        log.debug("reading connection %r failed: %s", conn_id, type(err).__name__)
        raise StorageError(
            f"cannot read Airflow connection '{conn_id}' for {loc.uri} ({type(err).__name__}); "
            "check that it is a valid connection of type aws",
            permanent=True,
        ) from None
    if not wrapper and not (loc.scheme == "s3" and conn_id == DEFAULT_CONNECTIONS["s3"]):
        # Only plain s3:// with the default id may fall back to boto3's own credential chain (instance
        # roles, env vars); for cos/oss/obs or a named connection there is no sane default endpoint.
        env_name = "AIRFLOW_CONN_" + re.sub(r"[^A-Za-z0-9]", "_", conn_id).upper()
        raise StorageError(
            f"connection '{conn_id}' for {loc.uri} is not defined; create an Airflow connection of type aws "
            f"(or set {env_name}) with login/password and extra endpoint_url, region_name, addressing_style",
            permanent=True,
        )
    extra = dict(wrapper.extra_config or {}) if wrapper else {}
    endpoint = wrapper.get_service_endpoint_url("s3") if wrapper else None
    region = (wrapper.region_name if wrapper else None) or extra.get("region") or None
    if loc.scheme != "s3" and not endpoint:
        raise StorageError(
            f"connection '{conn_id}' for {loc.uri} has no endpoint_url in its extra; set the {loc.scheme.upper()} "
            "endpoint (e.g. https://cos.<region>.myqcloud.com, https://oss-<region>.aliyuncs.com, "
            "https://obs.<region>.myhuaweicloud.com)",
            permanent=True,
        )
    is_aws = is_aws_endpoint(endpoint)

    config = Config(
        retries={"mode": "standard", "max_attempts": REQUEST_RETRIES},
        # small-object workers and s3transfer's ranged GETs can run at the same time: room for both
        max_pool_connections=max(10, 2 * concurrency + 4),
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        tcp_keepalive=True,
    )
    addressing_style = extra.get("addressing_style") or (extra.get("s3") or {}).get("addressing_style")
    if addressing_style:
        config = config.merge(Config(s3={"addressing_style": addressing_style}))
    if not is_aws:
        # boto3 >= 1.36 sends CRC checksums / aws-chunked bodies by default, which many S3-compatible stores
        # reject; we verify size and MD5/ETag ourselves instead.
        config = config.merge(
            Config(request_checksum_calculation="when_required", response_checksum_validation="when_required")
        )
    if wrapper and wrapper.botocore_config is not None:
        config = config.merge(wrapper.botocore_config)  # the connection's config_kwargs win
    try:
        client = aws.get_client_type(region_name=region, config=config)
    except ValueError as err:  # bad endpoint_url / region strings
        raise StorageError(
            f"cannot use connection '{conn_id}' for {loc.uri}: {err}; check endpoint_url and region_name in its extra",
            permanent=True,
        ) from None
    install(client)
    log.debug(
        "object storage client for connection %r: endpoint %s, region %s, addressing %s, aws=%s",
        conn_id,
        display_endpoint(endpoint),
        region,
        addressing_style or "auto",
        is_aws,
    )
    return Remote(client=client, conn_id=conn_id, endpoint=endpoint, is_aws=is_aws)


__all__ = ["CONNECT_TIMEOUT_S", "EngineSettings", "READ_TIMEOUT_S", "Remote", "is_aws_endpoint", "make_remote"]
