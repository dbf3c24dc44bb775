"""A container user is root by number after parsing, not by spelling: what the Docker backend and the spec refuse."""

import pytest

from operators.launch.docker.users import root_part


@pytest.mark.parametrize("user", ["0", "00", "+0", " 0 ", "root", "ROOT", "0:0", "00:1000", "root:1000", ""])
def test_uid_zero_in_any_spelling_is_root(user):
    assert root_part(user) == "user"


@pytest.mark.parametrize("user", ["1000:0", "1000:00", "1000:root", "ml:0", "1000:"])
def test_a_root_group_is_refused_too(user):
    assert root_part(user) == "group"


@pytest.mark.parametrize("user", ["1000", "1000:1000", "ml", "ml:ml", "10:20", "0100"])
def test_other_users_pass(user):
    assert root_part(user) is None
