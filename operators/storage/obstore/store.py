"""The obstore (Rust `object_store`) S3Store of one bucket, built from an Airflow connection's settings: the one place
the obstore engine (listing, downloads, uploads) gets its store from, and the one switch between obstore and
botocore.

The obstore engine runs on the connection both engines share (storage.remote.Remote: endpoint, addressing,
refreshable credentials) and leaves it the few requests it does not make itself (HEADs that tell an encrypted
object's ETag from an MD5, ListMultipartUploads after a multipart upload: storage.leftover_uploads); neither engine
imports the other."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta

from operators.storage.remote import (
    CONNECT_TIMEOUT_S,
    READ_TIMEOUT_S,
    EngineSettings,
    Remote,
)

log = logging.getLogger("operators.storage.hook")

# object_store's `timeout` bounds a whole request, body included: long enough for a 64 MiB range on a slow link,
# while `read_timeout` (no byte for that long) catches a stalled connection early.
REQUEST_TIMEOUT = timedelta(minutes=5)
# Writing, reading or hashing a buffer this large (~1-2 ms of MD5 per MiB) runs on a worker thread (hashlib and file
# I/O release the GIL): the event loop goes on starting and reading the other requests meanwhile.
OFFLOAD_BYTES = 256 * 1024


def obstore_settings(remote: Remote, bucket: str) -> EngineSettings | None:
    """The connection's settings when obstore can reach `bucket` exactly as botocore does, else None (and why, in
    the task log): the one switch between the engines. botocore stays for what we do not carry over: a custom CA
    bundle or disabled TLS verification, proxies, and anonymous (unsigned) access. Decided once per bucket of a
    connection (listing and downloads ask it in turn)."""
    choices = getattr(remote, "engine_choice", None)
    if choices is not None and bucket in choices:
        return choices[bucket]
    settings = _choose(remote, bucket)
    if choices is not None:
        choices[bucket] = settings
    return settings


def _choose(remote: Remote, bucket: str) -> EngineSettings | None:
    try:
        # lazy: obstore is optional (botocore serves the bucket without it)
        import obstore  # noqa: F401
    except ImportError:
        reason = "obstore is not installed"
    else:
        settings = remote.engine_settings(bucket)
        if settings.credentials is None:
            reason = "the connection has no credentials (unsigned requests)"
        elif not settings.endpoint.startswith("http://") and settings.verify is not True \
                and settings.verify != _default_ca_bundle():
            reason = "the connection sets its own TLS verification ('verify')"
        elif settings.proxies:
            reason = "the connection uses proxies"
        elif isinstance(settings.signature_version, str) and settings.signature_version not in ("s3v4", "v4"):
            reason = f"the connection signs with {settings.signature_version!r} (obstore signs with SigV4 only)"
        else:
            return settings
    # In the task log: which engine moved the bytes matters when comparing a slow stage with a fast one.
    log.info("listing, uploads and downloads via connection '%s' go through botocore: %s", remote.conn_id, reason)
    return None


def _default_ca_bundle() -> str:
    """The CA bundle botocore verifies with when the connection says nothing (obstore uses the system's roots)."""
    # lazy: botocore's HTTP machinery (urllib3), for a connection that verifies TLS its own way only
    from botocore.httpsession import get_cert_path

    return get_cert_path(True)


def make_store(settings: EngineSettings, bucket: str):
    """An obstore S3Store for `bucket` with the connection's endpoint, region, credentials and addressing style."""
    from obstore.store import (
        S3Store,  # lazy: obstore is optional (botocore serves the bucket without it)
    )

    credentials = settings.credentials

    def provide():
        # botocore refreshes assumed-role / instance credentials here when they are about to expire; their expiry
        # tells object_store when to ask again (static keys: never).
        frozen = credentials.get_frozen_credentials()
        expiry = getattr(credentials, "_expiry_time", None)
        return {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key,
                "token": frozen.token, "expires_at": expiry - timedelta(minutes=5) if expiry else None}

    config = {"region": settings.region or "us-east-1"}
    if settings.endpoint:
        config["endpoint"] = settings.endpoint
    config["virtual_hosted_style_request"] = settings.virtual_hosted
    return S3Store(
        bucket,
        config=config,
        credential_provider=provide,
        skip_signature=False,  # whatever AWS_SKIP_SIGNATURE says: the connection's credentials sign every request
        client_options={
            "allow_http": settings.endpoint.startswith("http://") if settings.endpoint else False,
            "connect_timeout": timedelta(seconds=CONNECT_TIMEOUT_S),
            "read_timeout": timedelta(seconds=READ_TIMEOUT_S),
            "timeout": REQUEST_TIMEOUT,
        },
        retry_config={
            "max_retries": settings.max_retries,
            "backoff": {"init_backoff": timedelta(milliseconds=50), "max_backoff": timedelta(seconds=20), "base": 2},
            "retry_timeout": timedelta(minutes=5),
        },
    )


def store_for(remote: Remote, bucket: str):
    """The obstore S3Store of `bucket` when the switch says obstore (one per bucket of a connection), else None."""
    settings = obstore_settings(remote, bucket)
    if settings is None:
        return None
    stores = remote.__dict__.setdefault("_obstore_stores", {})
    if bucket not in stores:
        stores[bucket] = make_store(settings, bucket)
    return stores[bucket]


def run_coroutine(coroutine):
    """Run one of the obstore engines' coroutines to its end from synchronous code: here, or on a thread of its own
    when the caller is inside an event loop (a deferrable's trigger, a notebook). Returns its result."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    outcome: list = []

    def run() -> None:
        try:
            outcome.append((True, asyncio.run(coroutine)))
        except BaseException as err:  # noqa: BLE001 - re-raised on the caller's thread
            outcome.append((False, err))

    thread = threading.Thread(target=run, name="obstore")
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


async def run_workers(*pools: tuple) -> None:
    """For each (work, items, count): `count` tasks (at most one per item) that await `work(item)` for the items of
    one shared iterator in turn. The first failure cancels every task and is raised as it is."""
    workers: list[asyncio.Task] = []
    for work, items, count in pools:
        async def worker(work=work, queue=iter(items)) -> None:
            for item in queue:
                await work(item)

        workers += [asyncio.create_task(worker()) for _ in range(min(count, len(items)))]
    if not workers:
        return
    try:
        done, _ = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if task.exception() is not None:
                raise task.exception()
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


__all__ = ["OFFLOAD_BYTES", "REQUEST_TIMEOUT", "make_store", "obstore_settings", "run_coroutine", "run_workers",
           "store_for"]
