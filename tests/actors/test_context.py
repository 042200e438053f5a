"""ActorContext: what a user-level actor reaches through `self.context`, on both bases."""

from __future__ import annotations

import itertools
import os

import pytest

import actors
from actors.context import ActorContext
from actors.lifecycle import Lifecycle
from tests.waiting import wait_for


class _Shared:
    """A per-host extension: counts how many were made in this process."""

    made = itertools.count(1)

    def __init__(self, context: ActorContext) -> None:
        self.serial = next(self.made)
        self.host_path = context.path


class UsesContext(actors.Actor):
    """Answers questions about its context and sends through it."""

    def receive(self, message, sender):
        kind = message[0]
        if kind == "where":
            ctx = self.context
            self.tell(sender, (ctx.path, self.path, self.path in ctx.entities,
                               ctx.entities.get(self.path) is self, ctx.resolve(self.path) is not None,
                               ctx.resolve("/user/served-by-nobody") is None, isinstance(ctx.config, dict)))
        elif kind == "route":  # the context's send, with an explicit sender
            self.context.route(message[2], message[1], ("routed", self.path))
        elif kind == "later":  # a timer through the context: the tick comes back as a message
            self.context.schedule(0.05, None, ("tick", message[1]), self)
        elif kind == "tick":
            self.tell(message[1], ("ticked", self.path))
        elif kind == "shared":
            shared = self.context.extension(_Shared, _Shared)
            self.tell(sender, (shared.serial, shared.host_path, os.getpid()))
        elif kind == "fail-after-settle":
            # A failure outside receive (in a settle hook), reported as receive raising it would be.
            done = []

            def hook() -> bool:
                if done:
                    return False
                done.append(True)
                self.context.report_failure(self, RuntimeError("failed in a callback"), message, sender)
                return True

            self.context.on_settle(hook)
            self.tell(sender, "armed")
        elif kind == "count":
            self.count = getattr(self, "count", 0) + 1
            self.tell(sender, self.count)


def test_an_entity_sees_its_host_through_its_context(system):
    system.spawn(UsesContext, "/user/ctx", entities=True)
    assert system.ask("/user/ctx/a", ("where",)) == ("/user/ctx", "/user/ctx/a", True, True, True, True, True)


def test_a_top_level_actor_has_its_own_path_as_the_context_path(system):
    system.spawn(UsesContext, "/user/top")
    assert system.ask("/user/top", ("where",))[:2] == ("/user/top", "/user/top")


def test_route_through_the_context_sends_as_the_given_sender(system):
    system.spawn(UsesContext, "/user/ctx", entities=True)
    probe = system.probe()
    system.tell("/user/ctx/a", ("route", probe.path, "/user/ctx/someone-else"))
    assert probe.receive_with_sender(timeout=5) == (("routed", "/user/ctx/a"), "/user/ctx/someone-else")


def test_schedule_through_the_context_delivers_to_the_owner(system):
    system.spawn(UsesContext, "/user/ctx", entities=True)
    probe = system.probe()
    system.tell("/user/ctx/a", ("later", probe.path))
    assert probe.receive(timeout=5) == ("ticked", "/user/ctx/a")
    probe.expect_no_message(0.2)


def test_an_extension_is_made_once_per_host_and_shared_by_its_actors(system):
    system.spawn(UsesContext, "/user/ctx", entities=True)
    first = system.ask("/user/ctx/a", ("shared",))
    assert first[1] == "/user/ctx"
    assert system.ask("/user/ctx/b", ("shared",)) == first
    assert system.ask("/user/ctx/a", ("shared",)) == first


def test_report_failure_restarts_the_actor_as_a_failure_in_receive_would(system):
    system.spawn(UsesContext, "/user/ctx", entities=True)
    assert system.ask("/user/ctx/a", ("count",)) == 1
    assert system.ask("/user/ctx/a", ("count",)) == 2
    assert system.ask("/user/ctx/a", ("fail-after-settle",)) == "armed"
    errors = wait_for(lambda: [e for e in system.errors().recent if "failed in a callback" in e.reason])
    assert errors[0].path == "/user/ctx/a"
    assert system.ask("/user/ctx/a", ("count",)) == 1  # a new instance


def test_an_actor_no_host_runs_says_how_to_run_it():
    with pytest.raises(RuntimeError, match=r"not running in an actor system.*system\.spawn"):
        UsesContext().tell("/user/x", "hello")


def test_actor_implements_the_lifecycle_the_host_calls():
    hooks = ("open_resources", "around_pre_start", "receive", "restart_carryover", "pre_restart",
             "around_post_restart", "keep_alive", "routes_lost", "post_stop", "stats")
    assert set(hooks) <= set(dir(Lifecycle))
    for name in hooks:
        assert callable(getattr(actors.Actor, name)), name


def test_the_context_and_the_lifecycle_are_exported_by_actors():
    assert actors.ActorContext is ActorContext and actors.Lifecycle is Lifecycle
    assert {"ActorContext", "Lifecycle"} <= set(actors.__all__)
