"""A layer of its own for the host option tests: it owns the host option `colour` (registered on import)."""

from __future__ import annotations

from typing import Any

import actors
from actors.errors import ConfigError
from actors.host_options import register_host_option

COLOURS = ("blue", "green")


def check_colour(name: str, value: Any, *, per_host: bool) -> None:
    """A colour is blue or green, optionally followed by -{shard} in a spawn's own value."""
    base = value.removesuffix("-{shard}") if isinstance(value, str) and per_host else value
    if base not in COLOURS:
        raise ConfigError(f"{name} must be one of {', '.join(COLOURS)}, got {value!r}")


register_host_option("colour", check_colour)


class Painter(actors.Actor):
    """Replies the colour its host was given (its config, with {shard} filled in)."""

    def receive(self, message: Any, sender: str | None) -> None:
        if sender is not None:
            self.tell(sender, self.config.get("colour"))
