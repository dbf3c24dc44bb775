"""The loopback S3 endpoint the benchmarks run against: MinIO (single node, one drive in the work directory).

The same server as the test fixtures (tests/minio_server.py; the binary is built by `make minio`, which `make
bench` depends on), minus the counting proxy: every client (ours, awscli, s5cmd) talks to it directly.
`probe_max_rate` measures its ceiling with a trivial client so the tables can show it.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from _common import tests_module

minio_server = tests_module("minio_server")  # the test fixture's server, loaded by path (see _common)

ACCESS_KEY = "bench"
SECRET_KEY = "bench-secret"
REGION = "us-east-1"


class S3Server(minio_server.MinioServer):
    """MinIO on 127.0.0.1 (or `host`: bench_cluster_staging.py gives the real node's bridge gateway; started by
    `start`, stopped by `stop` or `with`) with its drive on disk, next to the log
    (the benchmarks store GiBs: not in memory, and a real store writes to disk too); emptied on start."""

    name = f"MinIO {minio_server.pinned_version()}"

    def __init__(self, log_path: str, host: str = "127.0.0.1") -> None:
        data_dir = os.path.join(os.path.dirname(os.path.abspath(log_path)), "minio-drive")
        shutil.rmtree(data_dir, ignore_errors=True)
        os.makedirs(data_dir)
        super().__init__(ACCESS_KEY, SECRET_KEY, data_dir=data_dir, log_path=log_path, host=host)

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- clients --------------------------------------------------------------------------------------------------

    def tool_env(self) -> dict[str, str]:
        """Environment for awscli / s5cmd child processes and the Airflow connection `aws_default`."""
        env = dict(os.environ)
        env.update(
            AWS_ACCESS_KEY_ID=ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=SECRET_KEY,
            AWS_DEFAULT_REGION=REGION,
            AWS_REGION=REGION,
            AWS_EC2_METADATA_DISABLED="true",
            NO_PROXY="*",
        )
        env.update(self.airflow_connection_env())
        return env

    def airflow_connection_env(self) -> dict[str, str]:
        conn = {
            "conn_type": "aws",
            "login": ACCESS_KEY,
            "password": SECRET_KEY,
            "extra": {"endpoint_url": self.url, "region_name": REGION, "addressing_style": "path"},
        }
        return {"AIRFLOW_CONN_AWS_DEFAULT": json.dumps(conn)}

    # -- data -----------------------------------------------------------------------------------------------------

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def put_tree(self, bucket: str, prefix: str, local_dir: str, threads: int = 16) -> int:
        """Upload every file under local_dir to bucket/prefix/<relative path> (setup; not timed)."""
        client = self.client(max_pool_connections=threads + 4)
        paths = []
        for root, _, files in os.walk(local_dir):
            paths += [os.path.join(root, f) for f in files]

        def put(path: str) -> None:
            key = prefix + os.path.relpath(path, local_dir).replace(os.sep, "/")
            if os.path.getsize(path) > 64 * 1024 * 1024:
                client.upload_file(path, bucket, key)
            else:
                with open(path, "rb") as fh:
                    client.put_object(Bucket=bucket, Key=key, Body=fh.read())

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(put, paths))
        return len(paths)

    # -- the server's own ceiling ---------------------------------------------------------------------------------

    def probe_max_rate(self, bucket: str, key: str, seconds: float = 5.0, threads: int = 8) -> dict:
        """GET one object as fast as the server answers, with a trivial client: raw HTTP/1.1 on a presigned URL
        (signed once), no parsing beyond the status line, the body read and dropped. Returns requests/s, MB/s
        and the server's CPU use."""
        stop = time.monotonic() + seconds
        counts = [0] * threads
        nbytes = [0] * threads
        url = self.client().generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=3600)
        path = url.split(f":{self.port}", 1)[1]

        def worker(i: int) -> None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            while time.monotonic() < stop:
                conn.request("GET", path, headers={"Host": f"{self.host}:{self.port}"})
                response = conn.getresponse()
                body = response.read()
                if response.status != 200:
                    raise RuntimeError(f"probe GET {path}: HTTP {response.status}")
                counts[i] += 1
                nbytes[i] += len(body)
            conn.close()

        cpu0, t0 = self.cpu_seconds(), time.monotonic()
        workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        wall = time.monotonic() - t0
        server_cpu = self.cpu_seconds() - cpu0
        return {
            "requests_per_s": sum(counts) / wall,
            "mb_per_s": sum(nbytes) / wall / 1e6,
            "server_cpu_per_request_ms": 1000 * server_cpu / max(1, sum(counts)),
            "server_cores_busy": server_cpu / wall,
        }
