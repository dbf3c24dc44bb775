"""Fixtures of the storage tests of both engines."""

from __future__ import annotations

import hashlib

import pytest


@pytest.fixture
def md5_calls(monkeypatch) -> list[int]:
    """How many MD5s are started from now on (a spy on hashlib.md5, which every MD5 of the engines goes through)."""
    calls: list[int] = []
    real = hashlib.md5

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(hashlib, "md5", spy)
    return calls
