"""The local sandbox's network ([training] local_network): one network namespace per job, never the worker's.

User code on the local backend must not reach what the worker listens on (the Airflow API server, PostgreSQL, an S3
server on 127.0.0.1). So the first host's bubblewrap gets a new network namespace (--unshare-net: loopback only) and
every further host of the job joins that same namespace, so hosts still find each other at 127.0.0.1 (MASTER_ADDR,
TF_CONFIG). bubblewrap cannot join a namespace, so the others start through util-linux's nsenter on a descriptor of
the first namespace, checked against the namespace id bubblewrap itself reported (--json-status-fd) so a recycled pid
can never make a host join a foreign namespace. Why the first host's namespace rather than one sandbox for all hosts
or a separate holder process: each host keeps its own sandbox, log, exit status, pid record and stop, exactly as
with one host; and the namespace lives as long as any host uses it, with nothing more to start, record or reap.

- none (default): loopback only, no route out.
- slirp4netns: outbound traffic (pip, downloads) through Debian's user-mode stack, attached to the job's namespace
  with --disable-host-loopback (the worker's 127.0.0.1 stays out of reach). It exits when the last host's sandbox
  does (--exit-fd); the first host waits (bubblewrap --block-fd) until the network is configured.
- host: the worker's own network, loopback services included (weakens isolation: an admin's choice).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time

NETWORKS = ("none", "slirp4netns", "host")
SLIRP_NETNS_WAIT_SECONDS = 30.0
NS_GET_USERNS = 0xB701  # linux/nsfs.h _IO(0xb7, 0x1)


class NetworkUnavailable(RuntimeError):
    pass


def check_available(network: str) -> None:
    if network == "slirp4netns" and not shutil.which("slirp4netns"):
        raise NetworkUnavailable(
            "[training] local_network = slirp4netns but slirp4netns is not installed: install Debian's slirp4netns "
            "(`make sandbox-deps` does, as root) or set local_network = none")
    if network != "host" and not shutil.which("nsenter"):
        raise NetworkUnavailable("util-linux's nsenter is missing: install util-linux or set local_network = host")


def sandbox_status(path: str) -> dict:
    """What bubblewrap wrote to its --json-status-fd file so far, merged ({} when nothing)."""
    status: dict = {}
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return status
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # being written
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict):
            status.update(document)
    return status


def open_namespace(status_path: str, running, timeout: float = SLIRP_NETNS_WAIT_SECONDS) -> tuple[int, int | None]:
    """Descriptors of the network namespace (and, where bubblewrap made one, the user namespace owning it) of the
    sandbox whose status file is `status_path`; `running()` says whether that sandbox still runs."""
    deadline = time.monotonic() + timeout
    while True:
        status = sandbox_status(status_path)
        if "child-pid" in status or not running() or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    pid, netns = status.get("child-pid"), status.get("net-namespace")
    gone = NetworkUnavailable("the first host's sandbox ended before its network could be shared with the others")
    if type(pid) is not int or type(netns) is not int:
        raise gone
    try:
        net_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        raise gone from None
    if os.fstat(net_fd).st_ino != netns:  # the pid was recycled: not that sandbox's namespace
        os.close(net_fd)
        raise gone
    try:
        user_fd = fcntl.ioctl(net_fd, NS_GET_USERNS)  # the user namespace owning it, from the descriptor itself
    except OSError:
        return net_fd, None
    if os.fstat(user_fd).st_ino == os.stat("/proc/self/ns/user").st_ino:
        os.close(user_fd)  # bubblewrap ran privileged (a root worker): ours already, nothing to join
        return net_fd, None
    os.set_inheritable(user_fd, False)
    return net_fd, user_fd


def join_command(command: list[str], net_fd: int, user_fd: int | None) -> list[str]:
    """`command` run inside the namespace held by `net_fd` (pass both descriptors to the child)."""
    argv = [shutil.which("nsenter") or "nsenter", f"--net=/proc/self/fd/{net_fd}"]
    if user_fd is not None:
        argv += [f"--user=/proc/self/fd/{user_fd}", "--preserve-credentials"]
    return [*argv, "--", *command]


def start_slirp4netns(net_fd: int, user_fd: int | None, exit_fd: int, env: dict[str, str]) -> subprocess.Popen:
    """Outbound networking for the namespace of `net_fd`; returns once it is configured. It exits once every copy of
    the write end of the pipe whose read end is `exit_fd` is closed. env: its environment, the platform's (it runs
    as the worker's user: root on a root worker)."""
    ready_r, ready_w = os.pipe()
    argv = [shutil.which("slirp4netns") or "slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
            f"--exit-fd={exit_fd}", f"--ready-fd={ready_w}", "--netns-type=path"]
    if user_fd is not None:
        argv.append(f"--userns-path=/proc/self/fd/{user_fd}")
    argv += [f"/proc/self/fd/{net_fd}", "tap0"]
    fds = tuple(fd for fd in (net_fd, user_fd, exit_fd, ready_w) if fd is not None)
    try:
        proc = subprocess.Popen(argv, pass_fds=fds, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
    finally:
        os.close(ready_w)
    try:
        ready = os.read(ready_r, 1)
    finally:
        os.close(ready_r)
    if ready != b"1":
        err = proc.stderr.read().decode(errors="replace").strip().splitlines() if proc.wait(5) is not None else []
        raise NetworkUnavailable(f"slirp4netns could not configure the sandbox's network ({err[-1] if err else '?'})"
                                 "; check the worker can run it, or set [training] local_network = none")
    proc.stderr.close()
    return proc
