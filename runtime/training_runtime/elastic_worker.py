"""The worker shim of elastic training: torchrun runs ``python elastic_worker.py <script> <args>`` for each process.

Run by path, with whatever Python the job uses (the job's own virtual environment too): standard library only, no
import of the runtime. It runs the script as ``python <script> <args>`` would (``__main__``, ``sys.argv``, the
script's directory first on ``sys.path``) and adds what torchrun cannot know:

* **The script's own errors are not restarted.** torchrun restarts a failed worker group whatever the cause, so a
  script that raises ``ValueError`` on its first line would run ``max_restarts`` more times. An exception that is
  not a lost peer (below), or ``sys.exit`` with a non-zero code, is the script's: its traceback is printed as Python
  would, ``$TRAINING_ELASTIC_STATE/user-error`` records it for ``train``, and the torchrun agent (this process's
  parent, checked by its command line) gets SIGTERM before this process exits, so it stops instead of restarting;
  ``train`` then fails with the user-error exit code (1), which fails a Kubernetes Job at once.
* **A lost peer is restarted.** A ``torch.distributed`` error (``DistError`` and its subclasses) or a collective's
  connection error (gloo's "Connection closed by peer", NCCL aborts, store timeouts) means another host went away:
  the line ``elastic: lost a peer (...)`` names it (the address in the error, matched to the job's hosts), it is
  recorded in ``$TRAINING_ELASTIC_STATE/peer-lost``, and the process exits as it would, so torchrun restarts the group.
* **Each start of the workers is logged** (local rank 0): how many hosts formed the group, this host's rank in it,
  whether it is a re-formation (the count of starts on this host), and the newest file in the job's checkpoint
  directory: where the script will resume from, if it resumes.

Lines go to stderr prefixed ``[train] `` like the runtime's own.
"""

import json
import os
import re
import runpy
import signal
import socket
import sys
import time
import traceback

STATE_ENV = "TRAINING_ELASTIC_STATE"
CHECKPOINTS_ENV = "TRAINING_ELASTIC_CHECKPOINTS"
USER_ERROR_FILE = "user-error"
PEER_LOST_FILE = "peer-lost"
STARTS_FILE = "starts"
PREFIX = "[train] "
#: How long this process waits, after signalling the agent, for the agent to stop it.
AGENT_STOP_WAIT_SECONDS = 10.0
MAX_CHECKPOINT_ENTRIES = 10000

# Connection-level failures of collectives and stores: what a process sees when another host went away.
PEER_LOSS_MARKERS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "gloo/transport",
    "ProcessGroupGloo",
    "ProcessGroupNCCL",
    "NCCL communicator was aborted",
    "NCCL error",
    "Socket Timeout",
    "TCPStore",
    "wait timeout after",
    "Timed out waiting",
)
_PEER_ADDRESS = re.compile(r"\[([0-9A-Fa-f.:]+)\]:\d+")


def say(message):
    sys.stderr.write(PREFIX + message + "\n")
    sys.stderr.flush()


def _state_path(name):
    state = os.environ.get(STATE_ENV)
    return os.path.join(state, name) if state else None


def _write(name, text):
    path = _state_path(name)
    if path is None:
        return
    try:
        tmp = "%s.%d" % (path, os.getpid())
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError:
        pass


def _count_start():
    """This host's worker-group starts so far, this one included."""
    path = _state_path(STARTS_FILE)
    if path is None:
        return 1
    try:
        with open(path, encoding="utf-8") as handle:
            count = int(handle.read().strip() or 0)
    except (OSError, ValueError):
        count = 0
    _write(STARTS_FILE, str(count + 1))
    return count + 1


def newest_checkpoint(directory):
    """(path relative to `directory`, mtime) of its newest regular file, or None."""
    newest, seen = None, 0
    for dirpath, dirnames, filenames in os.walk(directory or ""):
        dirnames.sort()
        for name in filenames:
            seen += 1
            if seen > MAX_CHECKPOINT_ENTRIES:
                return newest
            path = os.path.join(dirpath, name)
            try:
                stat = os.lstat(path)
            except OSError:
                continue
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            if newest is None or stat.st_mtime > newest[1]:
                newest = (os.path.relpath(path, directory), stat.st_mtime)
    return newest


def _checkpoint_words():
    directory = os.environ.get(CHECKPOINTS_ENV)
    found = newest_checkpoint(directory) if directory else None
    if found is None:
        return "no checkpoint yet: the script starts from the beginning"
    when = time.strftime("%H:%M:%S", time.localtime(found[1]))
    return "newest checkpoint %s (written %s): the script resumes from it if it loads it" % (found[0], when)


def announce_start():
    if os.environ.get("LOCAL_RANK", "0") != "0":
        return
    starts = _count_start()
    group = "%s host(s), world size %s; this host is group rank %s" % (
        os.environ.get("GROUP_WORLD_SIZE", "?"), os.environ.get("WORLD_SIZE", "?"), os.environ.get("GROUP_RANK", "?"))
    if starts <= 1:
        say("elastic: workers started in a group of %s; %s" % (group, _checkpoint_words()))
    else:
        say("elastic: the group re-formed (start %d on this host, torchrun restart %s of %s): %s; %s" % (
            starts, os.environ.get("TORCHELASTIC_RESTART_COUNT", "?"), os.environ.get("TORCHELASTIC_MAX_RESTARTS", "?"),
            group, _checkpoint_words()))


def _chain(error):
    seen = []
    while error is not None and len(seen) < 8 and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def is_peer_loss(error):
    """Whether `error` (or what caused it) is a lost connection to another process of the group."""
    dist = sys.modules.get("torch.distributed")
    dist_error = getattr(dist, "DistError", None)
    for item in _chain(error):
        if isinstance(dist_error, type) and isinstance(item, dist_error):
            return True
        text = str(item)
        if any(marker in text for marker in PEER_LOSS_MARKERS):
            return True
    return False


def _host_addresses():
    """address -> [host names] of the job's hosts (TM_HOSTS), resolved now."""
    try:
        hosts = json.loads(os.environ.get("TM_HOSTS") or "[]")
    except ValueError:
        return {}
    addresses = {}
    for host in hosts[:256] if isinstance(hosts, list) else []:
        try:
            for info in socket.getaddrinfo(str(host), None, proto=socket.IPPROTO_TCP):
                names = addresses.setdefault(info[4][0], [])
                if host not in names:
                    names.append(host)
        except (OSError, UnicodeError):
            continue
    return addresses


def _peer_words(error, addresses):
    for item in _chain(error):
        match = _PEER_ADDRESS.search(str(item))
        if match:
            address = match.group(1)
            hosts = addresses.get(address)
            if hosts:
                return "%s at %s" % (" or ".join(hosts), address)
            return "a process at %s" % address
    return "a process of another host"


def _first_line(error):
    text = str(error).strip().splitlines()
    return "%s: %s" % (type(error).__name__, text[0][:300]) if text else type(error).__name__


def _stop_agent():
    """SIGTERM to the torchrun agent that started this process, so it stops instead of restarting the group."""
    parent = os.getppid()
    try:
        with open("/proc/%d/cmdline" % parent, "rb") as handle:
            command = handle.read()
    except OSError:
        return False
    # Whole arguments, not substrings: a parent whose title merely mentions torchrun (pytest-xdist names its worker
    # after the running test) is not the agent.
    argv = [arg.decode("utf-8", "replace") for arg in command.split(b"\0") if arg]
    is_agent = bool(argv) and (os.path.basename(argv[0]) == "torchrun" or "torch.distributed.run" in argv[1:3]
                               or any(os.path.basename(arg) == "torchrun" for arg in argv[1:2]))
    if not is_agent:
        return False
    try:
        os.kill(parent, signal.SIGTERM)
    except OSError:
        return False
    return True


def _user_error(code, what, details=""):
    rank = os.environ.get("RANK", "?")
    _write(USER_ERROR_FILE, "%s\n%s" % (what, ("Rank %s:\n%s" % (rank, details[-8000:])) if details else ""))
    say("elastic: rank %s failed in the script itself (%s): not restarting; the job fails" % (rank, what))
    # The agent stops this process with SIGTERM as part of its shutdown: end quietly with the script's code.
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(code))
    if _stop_agent():
        deadline = time.monotonic() + AGENT_STOP_WAIT_SECONDS
        while time.monotonic() < deadline:
            time.sleep(0.1)
    os._exit(code)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.stderr.write("usage: elastic_worker.py SCRIPT [ARGS...]\n")
        return 2
    script = argv[0]
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    addresses = _host_addresses() if os.environ.get("LOCAL_RANK", "0") == "0" else {}
    announce_start()
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as error:
        code = error.code
        if code is None or code == 0:
            raise
        if not isinstance(code, int):
            sys.stderr.write("%s\n" % code)
            code = 1
        sys.stderr.flush()
        sys.stdout.flush()
        _user_error(code, "sys.exit(%s)" % (error.code if isinstance(error.code, int) else repr(str(error.code))))
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - every failure of the script is classified here
        if is_peer_loss(error):
            _write(PEER_LOST_FILE, _first_line(error) + "\n")
            if os.environ.get("LOCAL_RANK", "0") == "0":
                say("elastic: lost a peer (%s): %s; torchrun restarts this host's processes and re-forms the group"
                    % (_peer_words(error, addresses), _first_line(error)))
            raise
        sys.excepthook(type(error), error, error.__traceback__)
        sys.stdout.flush()
        _user_error(1, _first_line(error), "".join(traceback.format_exception(type(error), error, error.__traceback__)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
