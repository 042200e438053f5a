"""What a sender remembers of its sends through the guardian to hosts it had no route for (actors/unrouted.py):
bounded, and never claiming fewer hosts than it sent to."""

from __future__ import annotations

from actors.paths import shard_of
from actors.unrouted import GROUP_KEPT, UNROUTED_KEPT, Unrouted, top_level


def test_top_level_is_the_root_and_first_name():
    assert top_level("/user/accounts/42/x") == "/user/accounts"
    assert top_level("/user/echo") == "/user/echo"


def test_a_route_that_appears_claims_the_shards_of_the_paths_sent_below_it_once():
    unrouted = Unrouted()
    for path in ("/user/accounts/1", "/user/accounts/2", "/user/other/3"):
        unrouted.add(path)
    shards = {shard_of(p, "/user/accounts", 4) for p in ("/user/accounts/1", "/user/accounts/2")}
    assert unrouted.take("/user/accounts", 4) == shards
    assert unrouted.take("/user/accounts", 4) == set()  # (taken: the handover has started)
    assert unrouted.take("/user/other", 1) == {0}
    assert not unrouted


def test_more_paths_under_one_name_than_a_group_keeps_claim_every_shard_below_it():
    unrouted = Unrouted()
    for i in range(GROUP_KEPT + 1):
        unrouted.add(f"/user/accounts/{i}")
    assert unrouted.take("/user/accounts/7", 1) == {0}  # (a host deeper down: the fold stays for the rest)
    assert unrouted.take("/user/accounts", 16) == set(range(16))
    assert not unrouted


def test_one_scatter_to_more_unknown_targets_than_kept_forgets_none_of_them():
    # The bound used to evict the oldest paths: a scatter of more than 4,096 unknown targets forgot its own first.
    unrouted = Unrouted()
    unrouted.add("/user/b")
    for i in range(UNROUTED_KEPT + 100):
        unrouted.add(f"/user/nobody/{i}")
    assert unrouted.take("/user/b", 1) == {0}


def test_more_unknown_names_than_kept_claim_every_host_that_appears():
    unrouted = Unrouted()
    unrouted.add("/user/b/1")
    for i in range(UNROUTED_KEPT + 1):
        unrouted.add(f"/user/nobody-{i}")
    assert unrouted.take("/user/b", 3) == {0, 1, 2}
    assert unrouted.take("/user/never-sent-to", 2) == {0, 1}  # (more than was sent, never less)
    assert unrouted.take("/temp/client", 1) == set()  # (clients and system actors are never claimed)
    assert unrouted.take("/system/spark-bridge", 1) == set()
