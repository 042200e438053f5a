"""Lets a script's own actor and message classes cross process boundaries, as `multiprocessing` does.

A class defined in a script run as `python tour.py` has `__module__ == "__main__"`; another process
would look it up in *its own* `__main__` and fail. When the script can be imported by a module name
from `sys.path` (`python tour.py` puts its directory first there, and actor processes inherit that
path), every class of `__main__` is re-homed under that name (`tour.Account`). An actor process then
imports the script as the module `tour`, so the script's `if __name__ == "__main__":` block does not run
there; a script without that guard is refused by `actors.start` inside the actor process.
"""

from __future__ import annotations

import sys

from journal.main_module import importable_name


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
