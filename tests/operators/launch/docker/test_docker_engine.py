"""A user name's ids in the image, against an engine that answers only what resolving one asks: create a container,
copy a file out of it, remove it. Starting it fails the test: the image's code (its `sh`, its `id`) would run as
whatever the name is, uid 0 included, before the launcher could refuse it. The real engine does the same in
tests/integration/test_docker_engine.py."""

from __future__ import annotations

import io
import tarfile

import pytest
from docker.errors import NotFound

from operators.launch.docker.engine import ids_in_image

IMAGE = "registry.example.com/tenant:1.0"
PASSWD = "root:x:0:0:root:/root:/bin/sh\ntoor:x:0:0::/root:/bin/sh\nml:x:1000:1000::/home/ml:/bin/sh\n" \
         "daemon:x:1:1::/:/usr/sbin/nologin\nbroken:x:nope:1::/:/bin/sh\n"
GROUP = "root:x:0:\nstaff:x:50:\nml:x:1000:\n"


class AccountsEngine:
    """An image holding `files` ({path: content}; a link when the content is None)."""

    def __init__(self, files: dict[str, str | None]):
        self.files, self.created, self.removed = files, [], []

    def create_container_from_config(self, config, name):
        self.created.append(config)
        return {"Id": "c1"}

    def start(self, container):
        pytest.fail("resolving a user started a container of the job's image: its code ran")

    def get_archive(self, container, path):
        if path not in self.files:
            raise NotFound(f"no {path}")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            member = tarfile.TarInfo(path.rsplit("/", 1)[1])
            content = self.files[path]
            if content is None:
                member.type, member.linkname = tarfile.SYMTYPE, "/somewhere/else"
                tar.addfile(member)
            else:
                member.size = len(content.encode())
                tar.addfile(member, io.BytesIO(content.encode()))
        data = buffer.getvalue()
        return iter([data[:100], data[100:]]), {"name": member.name}

    def remove_container(self, container, **kwargs):
        self.removed.append(container)


@pytest.mark.parametrize(("user", "ids"), [
    ("toor", (0, 0)), ("ml", (1000, 1000)), ("daemon", (1, 1)), ("1000", (1000, 1000)), ("4242", (4242, 0)),
    ("ml:staff", (1000, 50)), ("ml:77", (1000, 77)), ("4242:ml", (4242, 1000)), ("toor:staff", (0, 50)),
])
def test_a_user_is_resolved_from_the_images_account_files_without_running_it(user, ids):
    engine = AccountsEngine({"/etc/passwd": PASSWD, "/etc/group": GROUP})
    assert ids_in_image(engine, IMAGE, user) == ids
    assert engine.removed == ["c1"] and engine.created[0]["Image"] == IMAGE


@pytest.mark.parametrize(("files", "user", "message"), [
    ({"/etc/passwd": PASSWD}, "nobody", "user 'nobody' does not exist in image"),
    ({"/etc/passwd": PASSWD, "/etc/group": GROUP}, "ml:wheel", "group 'wheel' does not exist in image"),
    ({}, "ml", "user 'ml' does not exist in image"),
    ({"/etc/passwd": None}, "ml", "user 'ml' does not exist in image"),  # a link is not followed
    ({"/etc/passwd": "x" * (5 * 2**20)}, "ml", "/etc/passwd in image"),
])
def test_a_user_the_image_does_not_define_is_one_line_naming_it(files, user, message):
    engine = AccountsEngine(files)
    with pytest.raises(ValueError, match=message):
        ids_in_image(engine, IMAGE, user)
    assert engine.removed == ["c1"]
