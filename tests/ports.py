"""Free TCP ports for tests that start several listeners at once."""

from __future__ import annotations

from actors.system import free_ports

__all__ = ["free_ports"]
