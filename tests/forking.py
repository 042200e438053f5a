"""Running a piece of a test in a forked child of the test's process.

The shipped TCK (journal.testing) runs its forked-child cases the same way: one helper serves both.
"""

from __future__ import annotations

from journal.testing import _in_forked_child as in_forked_child

__all__ = ["in_forked_child"]
