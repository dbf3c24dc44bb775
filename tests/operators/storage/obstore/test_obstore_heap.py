"""storage.obstore.heap: once the obstore engine has made a store, the chunk buffers its transfers free are reused
by the next ones instead of being handed back to the kernel and faulted in again (the 2 GiB download's extra kernel
CPU, bench/README.md "Local transfers at full sizes")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]

# 40 rounds of what 16 ranges in flight do: each holds a ~1.4 MiB chunk (obstore's gather of a body's frames), then
# all are freed. Prints the minor page faults of the rounds.
CHURN = """
import resource, sys
if sys.argv[1] == "engine":
    from operators.storage.obstore.store import make_store
    from operators.storage.remote import EngineSettings
    make_store(EngineSettings("http://127.0.0.1:9", "us-east-1", False, None, True, None, 1), "bucket")
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    chunks = [b"x" * 1_400_000 for _ in range(16)]
    del chunks
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def churn_faults(mode: str) -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.pop("GLIBC_TUNABLES", None)
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    done = subprocess.run([sys.executable, "-c", CHURN, mode], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
                    reason="the thresholds are glibc's")
def test_chunk_buffers_freed_by_transfers_are_reused_not_faulted_in_again():
    pages_per_round = 16 * 1_400_000 // 4096
    plain = churn_faults("plain")
    engine = churn_faults("engine")
    # glibc's defaults give the freed chunks back again and again (here 11-40 of the 40 rounds' pages); the engine's
    # thresholds keep them: the first round's pages, and little more.
    assert plain > 4 * pages_per_round, f"the C heap's defaults no longer give freed chunks back ({plain} faults)"
    assert engine < 2 * pages_per_round < plain, f"{engine} minor faults: the freed chunk buffers were not reused"


def test_the_thresholds_are_set_once_per_process():
    from operators.storage.obstore import heap

    assert heap.keep_freed_buffers() == heap.keep_freed_buffers()
