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


@pytest.mark.parametrize(("path", "meant"), [
    ("feeder", "/user/feeder"), ("/feeder", "/user/feeder"), ("user/feeder", "/user/feeder"),
    ("accounts/42", "/user/accounts/42"), ("/user//a", "/user/a"), ("/user/a/", "/user/a"),
    ("/other/a", "/user/other/a"), ("system/spark-bridge", "/system/spark-bridge"),
    ("/user", None), ("", None), ("my feeder", None),
])
def test_a_path_without_its_root_or_with_empty_segments_names_the_path_it_likely_means(path, meant):
    # "path '/feeder' must look like '/user/<name>[/<name>...]'" left the user to work out '/user/feeder'.
    with pytest.raises(InvalidPath) as e:
        validate_path(path)
    assert (f"; did you mean {meant!r}?" in str(e.value)) if meant else "did you mean" not in str(e.value), e.value


def test_non_string_path_is_rejected():
    with pytest.raises(InvalidPath, match="must be a string"):
        validate_path(42)


def test_ancestors_walk_from_longest_to_shortest():
    assert list(ancestors("/user/accounts/42")) == ["/user/accounts/42", "/user/accounts"]
    assert parent("/user/accounts/42") == "/user/accounts"


@pytest.mark.parametrize(("path", "named"), [
    ("/user/accounts/ok\x08\x08\x1bcEVIL", "U+0008"),
    ("/user/accounts/\x1b[2J", "U+001B"),
    ("/user/accounts/a\x00b", "U+0000"),
    ("/user/accounts/a\x7fb", "U+007F"),
    ("/user/accounts/a\x9bb", "U+009B"),  # the C1 control sequence introducer
    ("/user/accounts/abc\u202edcba", "U+202E"),  # right-to-left override: makes one id look like another
])
def test_control_characters_are_refused_naming_the_character(path, named):
    with pytest.raises(InvalidPath) as caught:
        validate_path(path)
    assert f"control character {named}" in str(caught.value) and "printable" in str(caught.value)


def test_printable_escapes_control_and_invisible_characters_only():
    from actors.paths import printable

    assert printable("ok\x08\x1bcEVIL\u202e") == "ok\\x08\\x1bcEVIL\\u202e"
    assert printable("/user/konto/Zoë/東京") == "/user/konto/Zoë/東京"
    # A line separator broke a listing's line, an RLM or a zero-width space made two ids look the same.
    assert printable("a\u2028b\u200fc\u200bd\ufeff") == "a\\u2028b\\u200fc\\u200bd\\ufeff"


def test_tell_refuses_a_path_with_a_control_character(system):
    with pytest.raises(InvalidPath, match="U\\+001B"):
        system.tell("/user/accounts/ok\x1bcEVIL", "hello")


@pytest.mark.parametrize("path", ["/user/files/report-\udcff.txt", "/user/files/\ud800", "/user/\udfff/x"])
def test_a_lone_surrogate_is_refused_naming_it_and_the_fix(path):
    # A str decoded from bytes that are not UTF-8 (os.fsdecode of a file name) was accepted as an entity id; its
    # actor then failed at recovery with a raw UnicodeEncodeError, as no journal can store the id.
    with pytest.raises(InvalidPath) as caught:
        validate_path(path)
    message = str(caught.value)
    assert repr(path) in message and "lone surrogate U+D" in message and "UTF-8" in message
    assert "errors='replace'" in message and "hex" in message


def test_ask_refuses_an_entity_id_with_a_lone_surrogate(system):
    with pytest.raises(InvalidPath, match="lone surrogate U\\+DCFF"):
        system.ask("/user/files/file-\udcff", "hello", timeout=5)
