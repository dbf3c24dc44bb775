"""Files that several hosts of a job may write at once (the hosts of a local job share one root)."""

import os
import tempfile


def write_atomically(path, text):
    """Write ``text`` under a private name beside ``path``, then rename it over ``path``.

    A reader never sees half a file. The private name is unique per writer: a
    name built from the pid is not, as each host has its own pid namespace (two
    hosts' ``train`` were both pid 2, and one renamed the other's file away).
    """
    directory, name = os.path.split(path)
    handle, partial = tempfile.mkstemp(dir=directory or ".", prefix=".%s." % name, suffix=".partial")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(partial, 0o644)  # mkstemp's 0600 would hide it from the stage that reads it
        os.replace(partial, path)
    except BaseException:
        try:
            os.remove(partial)
        except FileNotFoundError:
            pass
        raise
