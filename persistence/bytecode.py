"""What a class's Python code can be seen to name: the code objects reachable from some functions.

Two checks read it, once per class: a `receive` override must hand messages on (PersistentActor), and a class
that names a snapshot or delete failure's type handles it (persistence.unhandled).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from types import CodeType
from typing import Any


def reachable_code(functions: Iterable[object], follow: Callable[[str, dict[str, Any]], object]) -> Iterator[
        CodeType | None]:
    """The code objects of `functions`, of the functions nested in them, and of those they call that
    `follow(name, module globals)` returns (a function, or None); None for one with no Python code (a builtin,
    a C method: what it calls cannot be seen). Each code once."""
    pending = list(functions)
    seen: set[CodeType] = set()
    while pending:
        function = pending.pop()
        code = getattr(function, "__code__", None)
        if code is None:
            yield None
            continue
        if code in seen:
            continue
        seen.add(code)
        namespace = getattr(function, "__globals__", {})
        codes = [code]
        while codes:
            c = codes.pop()
            yield c
            codes += [k for k in c.co_consts if inspect.iscode(k)]
            for name in c.co_names:
                called = follow(name, namespace)
                if called is not None:
                    pending.append(called)
