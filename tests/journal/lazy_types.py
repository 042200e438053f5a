"""A type registered under its default manifest, imported only by the process that writes it (see
tests/journal/test_serialization.py::test_a_reader_imports_the_module_of_a_default_manifest_it_has_not_imported)."""

from __future__ import annotations

from dataclasses import dataclass

from journal import register_type


@register_type
@dataclass(frozen=True)
class Lazy:
    """Stored as "tests.journal.lazy_types.Lazy"."""

    amount: int
