"""A long-lived client that attaches again after each restart of a system checks a frame against the newest key
first (a system started without a secret file gets a new secret each start)."""

from __future__ import annotations

import os

import pytest

from actors import auth
from tests.actors.sample import Echo, Ping, Pong

pytestmark = pytest.mark.timeout(120)


def test_the_secret_of_the_system_attached_last_is_tried_first(make_system):
    """`_accepted` held every secret this process had attached with, oldest first, and each received frame was
    HMAC-checked against them in that order: a client attached again after each of N restarts of its system hashed
    every frame N times before the one key that verifies it (a year of nightly restarts: 365 passes over every
    batch it receives)."""
    secrets_used = []
    for n in range(3):
        system = make_system("multiproc")
        secrets_used.append(auth.read_secret(os.path.join(system.run_dir, auth.SECRET_NAME)))
        assert auth._accepted[0] == secrets_used[-1]  # (it is what this process signs with now)
        system.spawn(Echo, "/user/echo")
        assert system.ask("/user/echo", Ping(n)) == Pong(n, "/user/echo")
        system.shutdown()
    assert len(set(secrets_used)) == 3
