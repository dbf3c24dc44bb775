"""Whether a container user (Docker's `user`: uid, uid:gid, name or name:group) is root, by number after parsing:
"0", "00", "+0", "root", "0:0", "1000:0" all are. The image's USER is judged the same way when the job gives no user. A
name other than root (or a uid alone) is resolved in the image at launch, and the resolved ids are checked again
(launcher.py)."""

from __future__ import annotations


def _is_root_id(text: str) -> bool:
    text = text.strip()
    if text.lower() == "root":
        return True
    try:
        return int(text, 10) == 0
    except ValueError:
        return False


def root_part(user: str) -> str | None:
    """'user' or 'group' when that part of `user` is root (or empty user), else None."""
    uid, sep, gid = user.strip().partition(":")
    if not uid.strip() or _is_root_id(uid):
        return "user"
    if sep and (not gid.strip() or _is_root_id(gid)):
        return "group"
    return None

