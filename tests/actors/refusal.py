"""start_refused: actors.start() for a test that expects it to raise, without leaving a system running if it does not."""

from __future__ import annotations

import itertools
from typing import Any, NoReturn

import pytest

import actors
from tests.conftest import SESSION_TOKEN, stop_system

_counter = itertools.count(1)


def start_refused(base: str, **options: Any) -> NoReturn:
    """Call actors.start(base, **options) inside `pytest.raises(...)`.

    A bare `actors.start` there left the system it started running when the refusal under test was missing
    (`pytest.raises` only reports "DID NOT RAISE"). Here a system that did start is shut down (what it left behind
    killed and reported as a leak by tests/conftest.py), and the test fails naming the options. A multiproc start
    gets a tag of this test session unless the test gives its own, so that a refusal which left processes behind
    (a half-started system) is found by the session's leak check too.
    """
    if base != "local":
        options.setdefault("tag", f"{SESSION_TOKEN}-refused-{next(_counter)}-")
    system = actors.start(base, **options)
    stop_system(system)
    pytest.fail(f"actors.start({base!r}, {', '.join(f'{k}={v!r}' for k, v in options.items())}) started a system "
                "(now shut down) instead of refusing", pytrace=False)
