"""Small objects of the local store: whole files written from memory (pointers, markers, metrics) through a temp
name and a rename, and deletes. A bucket's (reads, writes, deletes) are storage.botocore.small_objects'."""

from __future__ import annotations

import os
import shutil

from operators.storage.transfers import remove_quietly, temp_name


def write_local(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temp = temp_name(path)
    try:
        with open(temp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, path)
    except BaseException:
        remove_quietly(temp)
        raise


def delete_local(path: str) -> int:
    if os.path.isdir(path) and not os.path.islink(path):
        count = sum(len(files) for _, _, files in os.walk(path))
        shutil.rmtree(path)
        return count
    if os.path.lexists(path):
        os.unlink(path)
        return 1
    return 0


__all__ = ["delete_local", "write_local"]
