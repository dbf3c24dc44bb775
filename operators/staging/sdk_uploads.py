"""The SDK's code staging area, per user: `<workspace>/staging/code/<user>/<sha256>.tar.gz`.

Each user's uploads live in a directory of their own, so a spec's source_dir can be checked against the run's
triggering user (operators/settings.TrainingSettings.platform_areas_for): one user's uploaded code is never another
user's source_dir, and a quota counts what one user keeps there.
"""

from __future__ import annotations

import hashlib
import os
import re

_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


def user_dir_name(user: str) -> str:
    """A directory name for a user name: the name itself when it is plain, else a digest (never '..', '/', '')."""
    if _PLAIN.match(user) and user not in (".", ".."):
        return user
    return "u-" + hashlib.sha256(user.encode()).hexdigest()[:32]


def used_bytes(directory: str, *, besides: str | None = None) -> int:
    """Bytes of the regular files in one user's staging directory (`besides` not counted: it is being replaced)."""
    total = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if entry.path != besides and entry.is_file(follow_symlinks=False):
            total += entry.stat(follow_symlinks=False).st_size
    return total
