"""Two actor systems joined as a Thespian convention: paths resolve across them."""

from __future__ import annotations

import os

import pytest

import actors
from actors.system import tagged_pids
from tests.actors.sample import Echo, Ping, Pong


@pytest.mark.timeout(120)
def test_actor_on_member_reaches_entity_on_leader_by_path(make_system):
    leader = make_system("multiproc")
    member = make_system("multiproc", leader=f"127.0.0.1:{leader.admin_port}", node="m1",
                         secret_file=os.path.join(leader.run_dir, "secret"))  # members share the leader's secret
    leader.spawn(Echo, "/user/accounts", entities=True)
    leader.spawn(Echo, "/user/remote", node="m1")
    hosts = leader.status().hosts
    # The /user/remote host really runs in the member system's processes.
    assert hosts["/user/remote"].pid in tagged_pids(member.tag)
    assert hosts["/user/accounts"].pid in tagged_pids(leader.tag)
    probe = leader.probe()
    probe.tell("/user/remote", ("fwd", "/user/accounts/7", Ping(1)))
    assert probe.receive(timeout=10) == Pong(1, "/user/accounts/7")
    # A client attached to the member finds the same directory (through the member's node agent).
    client = actors.connect(member.admin_port)
    try:
        assert client.ask("/user/accounts/8", Ping(2), timeout=10) == Pong(2, "/user/accounts/8")
        assert client.ask("/user/accounts/9", Ping(3), timeout=10) == Pong(3, "/user/accounts/9")
    finally:
        client.close()
