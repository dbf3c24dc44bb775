"""What a hostile training script tries against the kernel and root's files, for every backend's tests: the source of
`hostile_reached()`, prepended to a test's training script. Each attempt writes back the value a file already holds
(or only opens it), so it is harmless where it succeeds."""

PROBE = '''
import os as _os


def _attempt(action):
    try:
        action()
        return True
    except OSError:
        return False


def _rewrite(path):
    value = open(path).read()
    with open(path, "w") as f:
        f.write(value)


def hostile_reached():
    """The names of what this process could reach: a sysctl, sysrq, drop_caches, /etc/shadow; [] when nothing."""
    attempts = {"core_pattern": lambda: _rewrite("/proc/sys/kernel/core_pattern"),
                "drop_caches": lambda: _os.close(_os.open("/proc/sys/vm/drop_caches", _os.O_WRONLY)),
                "sysrq": lambda: _os.close(_os.open("/proc/sysrq-trigger", _os.O_WRONLY)),
                "shadow": lambda: open("/etc/shadow").read()}
    return sorted(name for name, action in attempts.items() if _attempt(action))

'''
