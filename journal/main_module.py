"""The name under which other processes import this process's `__main__` (a script run as `python tour.py`).

A class defined in such a script has `__module__ == "__main__"`, a name no other process resolves to it: actor
processes import the script by this name (actors.main_module), and the journal stores the script's registered
classes under it (journal.register_type's default manifest), so that every process reads them back.
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
