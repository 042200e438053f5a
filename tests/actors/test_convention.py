"""Two actor systems joined as a Thespian convention: paths resolve across them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import actors
from actors.system import tagged_pids
from tests.actors.sample import Echo, Ping, Pong

REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")


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


@pytest.mark.timeout(120)
def test_a_client_of_a_member_has_the_members_run_dir(make_system):
    """connect(member port).run_dir is the member's own run dir (its hosts' logs), not the leader's, which is
    what the guardian's configuration holds; `reprise status --json` of either port says the same."""
    leader = make_system("multiproc")
    member = make_system("multiproc", leader=f"127.0.0.1:{leader.admin_port}", node="m1",
                         secret_file=os.path.join(leader.run_dir, "secret"))
    assert member.run_dir != leader.run_dir
    to_member, to_leader = actors.connect(member.admin_port), actors.connect(leader.admin_port)
    try:
        assert (to_member.node, to_member.run_dir) == ("m1", member.run_dir)
        assert (to_leader.node, to_leader.run_dir) == ("leader", leader.run_dir)
        assert to_member.config["run_dir"] == leader.run_dir  # (the system's configuration: the guardian's)
    finally:
        to_member.close()
        to_leader.close()
    for system in (member, leader):
        shown = subprocess.run([REPRISE, "status", "--port", str(system.admin_port), "--json"], capture_output=True,
                               text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["run_dir"] == system.run_dir
        text = subprocess.run([REPRISE, "status", "--port", str(system.admin_port)], capture_output=True, text=True,
                              timeout=60)
        assert f"logs          {system.run_dir}  " in text.stdout, text.stdout  # the same as --json
