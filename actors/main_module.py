"""Lets a script's own actor and message classes cross process boundaries, as `multiprocessing` does.

A class defined in a script run as `python tour.py` has `__module__ == "__main__"`; another process
would look it up in *its own* `__main__` and fail. When the script can be imported by a module name
from `sys.path` (`python tour.py` puts its directory first there, and actor processes inherit that
path), every class of `__main__` is re-homed under that name (`tour.Account`). An actor process then
imports the script as the module `tour`, so the script's `if __name__ == "__main__":` block does not run
there; a script without that guard is refused by `actors.start` inside the actor process.
"""

from __future__ import annotations

import os
import sys


def importable_name() -> str | None:
    """The module name under which another process can import this process's `__main__`, or None."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        name: str = spec.name  # run with `python -m package.module`
        return name
    path = getattr(main, "__file__", None)
    if not path or not path.endswith(".py"):
        return None  # an interactive session or `python -c`: nothing another process could import
    path = os.path.realpath(path)
    for entry in sys.path:
        root = os.path.realpath(entry or os.getcwd())
        if os.path.dirname(path) == root or path.startswith(root + os.sep):
            parts = os.path.relpath(path, root)[:-3].split(os.sep)
            if all(part.isidentifier() for part in parts):
                return ".".join(parts)
    return None


def adopt_main_classes() -> str | None:
    """Re-home the classes defined in `__main__` under its importable name; return that name or None."""
    name = importable_name()
    main = sys.modules.get("__main__")
    if name is None or main is None:
        return None
    # Pickle finds a class by module and qualified name and checks it gets the same object back, so the
    # name must lead to this very module (importing the file again would make a second, different class).
    sys.modules.setdefault(name, main)
    if sys.modules[name] is not main:
        return None
    for value in list(vars(main).values()):
        if isinstance(value, type) and value.__module__ == "__main__":
            value.__module__ = name
    return name
