"""Path validation and prefix walking (pure functions)."""

import pytest

from actors import InvalidPath, validate_path
from actors.paths import ancestors, parent


@pytest.mark.parametrize("path", ["/user/a", "/user/accounts/42", "/system/spark-bridge", "/temp/x/ask-1"])
def test_valid_paths_pass(path):
    assert validate_path(path) == path


@pytest.mark.parametrize("path, fragment", [
    ("user/a", "must look like"),
    ("/user", "must look like"),
    ("/user//a", "no empty segments"),
    ("/user/a/", "no empty segments"),
    ("/other/a", "must start with one of"),
    ("/user/*", "wildcard"),
    ("/user/accounts/[12]", "wildcard"),
    ("/user/a b", "invalid segment"),
    ("/user/../a", "invalid segment"),
])
def test_invalid_paths_are_rejected_with_a_reason(path, fragment):
    with pytest.raises(InvalidPath, match=fragment.replace("[", r"\[")):
        validate_path(path)


def test_non_string_path_is_rejected():
    with pytest.raises(InvalidPath, match="must be a string"):
        validate_path(42)


def test_ancestors_walk_from_longest_to_shortest():
    assert list(ancestors("/user/accounts/42")) == ["/user/accounts/42", "/user/accounts"]
    assert parent("/user/accounts/42") == "/user/accounts"
