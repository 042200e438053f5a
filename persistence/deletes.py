"""An actor's delete_messages, run one journal transaction per turn so that its host's other entities go on meanwhile.

A host serves many entities on one thread: a delete of thousands of large events run to its end inside the command
that asked for it held every other entity of the host for as long (1,500 events of 32 KiB in SQLite: 0.27 s; 6,000:
1 s). Here the first step runs in the call (it fixes the bound: events persisted afterwards are kept, as in Akka,
whose journal handles the delete before the writes sent after it), and each further one in a turn of its own, after
the pause the journal asks for, through a timer of the actor's (which also keeps an idle entity from being
passivated meanwhile). An actor's deletes run one after another in call order, and each reply
(DeleteMessagesSuccess/Failure) arrives as a command once its delete is complete.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from journal import MAX_SEQUENCE_NR
from persistence.messages import DeleteMessagesFailure, DeleteMessagesSuccess

if TYPE_CHECKING:
    from journal import Journal

Reply = DeleteMessagesSuccess | DeleteMessagesFailure


class DeleteStep:
    """The timer message that runs the next step of an actor's running delete (one instance: checked by identity)."""

    __slots__ = ()

    def __reduce__(self) -> str:
        return "DELETE_STEP"  # (pickled as the module's one instance)


DELETE_STEP = DeleteStep()


class _Delete:
    """One delete_messages call: what was asked, the bound fixed at the call (None: the journal fixes it in its first
    step), its steps once started, or the error that failed it before."""

    __slots__ = ("to_sequence_nr", "bound", "steps", "error")

    def __init__(self, to_sequence_nr: int, bound: int | None, error: Exception | None = None) -> None:
        self.to_sequence_nr = to_sequence_nr
        self.bound = bound
        self.steps: Iterator[float] | None = None
        self.error = error


class Deletes:
    """The delete_messages calls of one actor instance, run one at a time in call order.

    `schedule(pause)` has DELETE_STEP delivered to the actor after `pause` s (the actor then calls `step()`);
    `reply(message)` hands it a DeleteMessagesSuccess/Failure once that delete is complete.
    """

    def __init__(self, journal: Journal, persistence_id: str, schedule: Callable[[float], object],
                 reply: Callable[[Reply], None]) -> None:
        self._journal = journal
        self._pid = persistence_id
        self._schedule = schedule
        self._reply = reply
        self._queue: deque[_Delete] = deque()

    def __bool__(self) -> bool:
        return bool(self._queue)

    def add(self, to_sequence_nr: int) -> None:
        """Start a delete up to `to_sequence_nr`, or queue it behind the running one with its bound fixed now."""
        if not self._queue:
            self._queue.append(_Delete(to_sequence_nr, None))
            self._run(self._start)
            return
        bound, error = to_sequence_nr, None
        if to_sequence_nr == MAX_SEQUENCE_NR:
            try:  # (what the journal holds now: events persisted after this call are kept)
                bound = self._journal.highest_sequence_nr(self._pid)
            except Exception as exc:
                error = exc
        self._queue.append(_Delete(to_sequence_nr, bound, error))

    def step(self) -> None:
        """Run the next step of the running delete (its timer fired)."""
        if self._queue:
            self._run(self._next)

    def finish_now(self) -> list[Reply]:
        """Run every delete to its end now, blocking (the instance goes away); their replies, in call order."""
        replies: list[Reply] = []
        while self._queue:
            head = self._queue.popleft()
            try:
                if head.error is not None:
                    raise head.error
                steps = head.steps if head.steps is not None else self._steps_of(head)
                for pause in steps:
                    time.sleep(pause)
                replies.append(DeleteMessagesSuccess(head.to_sequence_nr))
            except Exception as exc:
                replies.append(DeleteMessagesFailure(exc, head.to_sequence_nr))
        return replies

    def _steps_of(self, delete: _Delete) -> Iterator[float]:
        bound = delete.to_sequence_nr if delete.bound is None else delete.bound
        journal = self._journal
        if not _steps_are_its_delete(journal):
            journal.delete_messages_to(self._pid, bound)
            return iter(())
        return journal.delete_in_steps(self._pid, bound)

    def _start(self, head: _Delete) -> float | None:
        if head.error is not None:
            raise head.error
        head.steps = self._steps_of(head)
        return next(head.steps, None)

    @staticmethod
    def _next(head: _Delete) -> float | None:
        return next(head.steps, None) if head.steps is not None else None

    def _run(self, advance: Callable[[_Delete], float | None]) -> None:
        """Advance the running delete by one step; when it is complete, reply and start the next one."""
        while self._queue:
            head = self._queue[0]
            try:
                pause = advance(head)
            except Exception as exc:
                self._queue.popleft()
                self._reply(DeleteMessagesFailure(exc, head.to_sequence_nr))
            else:
                if pause is not None:
                    self._schedule(pause)
                    return
                self._queue.popleft()
                self._reply(DeleteMessagesSuccess(head.to_sequence_nr))
            advance = self._start


def _defined_in(cls: type, name: str) -> type | None:
    return next((k for k in cls.__mro__ if name in k.__dict__), None)


def _steps_are_its_delete(journal: Journal) -> bool:
    """Whether `journal.delete_in_steps` is its delete: not for a plugin that overrides delete_messages_to below the
    class whose delete_in_steps it inherits (a subclass of SqliteJournal), nor for a wrapper that hands what it does
    not define to an inner journal: their own delete_messages_to is the delete, run whole."""
    steps, whole = _defined_in(type(journal), "delete_in_steps"), _defined_in(type(journal), "delete_messages_to")
    return steps is not None and whole is not None and issubclass(steps, whole)
