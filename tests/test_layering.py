"""The layering, enforced: journal <- actors <- persistence <- spark_bridge.

Parses every module of the four packages (imports inside functions included) and fails on
(a) an upward import: journal imports none of the others, actors only journal, persistence journal and
    actors, spark_bridge any of them;
(b) a use of another package's `_private` names: importing them (`from persistence.delivery import
    _Delivery`, `import journal._x`), reading them off an imported module (`sqlite_wal._dms_held`), and
    in a subclass of a lower layer's class, overriding, reading or setting the `_private` members it
    inherits (`self._host`, overriding `_send`; implementing an @abstractmethod, such as a journal
    backend's `_store`, is what it is for and allowed), and elsewhere reading `obj._name` where only a
    lower layer's classes define `_name` (`actor._host`).

KNOWN_VIOLATIONS lists the violations that exist today; it may only shrink. A new violation fails, and
so does an entry that no longer occurs (delete it from the list).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each package and the packages it may import; the order is bottom to top.
LAYERS: dict[str, frozenset[str]] = {
    "journal": frozenset(),
    "actors": frozenset({"journal"}),
    "persistence": frozenset({"journal", "actors"}),
    "spark_bridge": frozenset({"journal", "actors", "persistence"}),
}

# Today's violations (issue 14: none left). Never add one: give the lower layer a public API instead.
KNOWN_VIOLATIONS: frozenset[str] = frozenset()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules(package: str) -> Iterator[tuple[str, str, ast.Module]]:
    """(path relative to the root, dotted module name, syntax tree) of every module of `package`."""
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, package)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for filename in sorted(f for f in filenames if f.endswith(".py")):
            path = os.path.join(dirpath, filename)
            rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
            dotted = rel[:-3].replace("/", ".").removesuffix(".__init__")
            with open(path, encoding="utf-8") as f:
                yield rel, dotted, ast.parse(f.read(), filename=rel)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module name of a (possibly relative) `from ... import`."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _is_self(node: ast.expr) -> bool:
    """`self` or `super()`: the object a method runs on."""
    return ((isinstance(node, ast.Name) and node.id == "self")
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"))


@dataclass
class _Class:
    """A class of one of the packages: where it is, its bases' names, the `_private` members it defines."""

    package: str
    bases: list[str]
    members: set[str]
    abstract: set[str] = field(default_factory=set)  # @abstractmethod members: meant to be implemented


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):  # Generic[T], Base[T]
        return _base_name(node.value)
    return None


def _classes(package: str, tree: ast.Module) -> Iterator[tuple[str, _Class]]:
    """Every class of a module with the private members it defines: methods, class attributes, self._x = ..."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        members: set[str] = set()
        abstract: set[str] = set()
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and _private(item.name):
                members.add(item.name)
                if any(_base_name(d) == "abstractmethod" for d in item.decorator_list):
                    abstract.add(item.name)
            targets = (item.targets if isinstance(item, ast.Assign)
                       else [item.target] if isinstance(item, ast.AnnAssign) else [])
            members.update(t.id for t in targets if isinstance(t, ast.Name) and _private(t.id))
        for sub in ast.walk(node):
            if (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and _private(sub.attr)
                    and isinstance(sub.value, ast.Name) and sub.value.id == "self"):
                members.add(sub.attr)
        bases = [b for b in map(_base_name, node.bases) if b]
        yield node.name, _Class(package, bases, members, abstract)


class _Hierarchy:
    """The classes of the four packages by name, to find what a class inherits from a lower layer."""

    def __init__(self, classes: list[tuple[str, _Class]]) -> None:
        self.by_name: dict[str, list[_Class]] = {}
        for name, cls in classes:
            self.by_name.setdefault(name, []).append(cls)

    def inherited(self, cls: _Class, lower: frozenset[str]) -> dict[str, str]:
        """Private member -> lower package, for the members `cls` inherits from classes of `lower`."""
        found: dict[str, str] = {}
        seen: set[int] = set()
        todo = list(cls.bases)
        while todo:
            for base in self.by_name.get(todo.pop(), []):
                if id(base) in seen:
                    continue
                seen.add(id(base))
                todo += base.bases
                if base.package in lower:
                    for member in base.members - base.abstract:
                        found.setdefault(member, base.package)
        return found

    def members_of(self, packages: set[str] | frozenset[str]) -> dict[str, str]:
        """Private member -> package, for every class of `packages`."""
        found: dict[str, str] = {}
        for classes in self.by_name.values():
            for cls in classes:
                if cls.package in packages:
                    for member in cls.members:
                        found.setdefault(member, cls.package)
        return found


@dataclass
class _Checker:
    """The violations of one module of `package`, as 'path: what' strings."""

    rel: str
    module: str
    package: str
    hierarchy: _Hierarchy
    found: set[str] = field(default_factory=set)
    bound: dict[str, str] = field(default_factory=dict)  # local name -> module/object of another package

    def check(self, tree: ast.Module) -> set[str]:
        """Walk the whole module, function bodies included."""
        is_package = self.rel.endswith("__init__.py")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._imported(alias.name)
                    if alias.asname:
                        self.bound[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.bound.setdefault(top, top)
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(node, self.module, is_package)
                self._imported(source)
                for alias in node.names:
                    if self._other(source) and _private(alias.name):
                        self.found.add(f"{self.rel}: imports {source}.{alias.name}")
                    elif alias.name != "*":
                        self.bound[alias.asname or alias.name] = f"{source}.{alias.name}"
        lower = LAYERS[self.package]
        # Private members of a lower layer's classes that this package does not define in any class itself.
        own = self.hierarchy.members_of({self.package})
        foreign = {k: v for k, v in self.hierarchy.members_of(lower).items() if k not in own}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                self._subclass(node, lower)
            elif isinstance(node, ast.Attribute) and _private(node.attr) and not _is_self(node.value):
                self._attribute(node, foreign)
        return self.found

    def _other(self, module: str) -> bool:
        top = module.split(".")[0]
        return top in LAYERS and top != self.package

    def _imported(self, module: str) -> None:
        top = module.split(".")[0]
        if not self._other(module):
            return
        if top not in LAYERS[self.package]:
            self.found.add(f"{self.rel}: upward import of {module}")
        if any(_private(part) for part in module.split(".")[1:]):
            self.found.add(f"{self.rel}: imports private module {module}")

    def _subclass(self, node: ast.ClassDef, lower: frozenset[str]) -> None:
        """A subclass of a lower layer's class that overrides or touches the private members it inherits."""
        bases = [b for b in map(_base_name, node.bases) if b]
        inherited = self.hierarchy.inherited(_Class(self.package, bases, set()), lower)
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in inherited:
                self.found.add(f"{self.rel}: {node.name} overrides private {item.name} of {inherited[item.name]}")
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and sub.attr in inherited and _is_self(sub.value):
                verb = "sets" if isinstance(sub.ctx, ast.Store) else "uses"
                self.found.add(f"{self.rel}: {node.name} {verb} private {sub.attr} of {inherited[sub.attr]}")

    def _attribute(self, node: ast.Attribute, foreign: dict[str, str]) -> None:
        chain = [node.attr]
        value = node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        root = value.id if isinstance(value, ast.Name) else None
        if root is not None and root in self.bound and self._other(self.bound[root]):
            parts = [*reversed(chain)]
            first = next(i for i, part in enumerate(parts) if _private(part))
            if first == len(parts) - 1:  # else: found where the walk reaches the shorter chain
                self.found.add(f"{self.rel}: uses {'.'.join([self.bound[root], *parts])}")
        elif node.attr in foreign:
            verb = "sets" if isinstance(node.ctx, ast.Store) else "uses"
            self.found.add(f"{self.rel}: {verb} private {node.attr} of {foreign[node.attr]}")


def violations() -> set[str]:
    """Every layering violation in the four packages today."""
    modules = {package: list(_modules(package)) for package in LAYERS}
    hierarchy = _Hierarchy([c for package, ms in modules.items() for _, _, tree in ms for c in _classes(package, tree)])
    found: set[str] = set()
    for package, ms in modules.items():
        for rel, dotted, tree in ms:
            found |= _Checker(rel, dotted, package, hierarchy).check(tree)
    return found


def test_no_upward_imports_and_no_use_of_another_layers_private_names() -> None:
    found = violations()
    new = sorted(found - KNOWN_VIOLATIONS)
    assert not new, (
        "layering violations (journal <- actors <- persistence <- spark_bridge; a package may import only "
        "the packages below it, and use only their public names):\n  " + "\n  ".join(new) + "\n"
        "Fix: import downwards only (move the code, or let the lower layer take a hook/registration), and "
        "give the lower layer a public function/method/attribute instead of reaching for its _private one. "
        "Do not add to KNOWN_VIOLATIONS in tests/test_layering.py.")


def test_known_violations_only_shrink() -> None:
    gone = sorted(KNOWN_VIOLATIONS - violations())
    assert not gone, (
        "these allowlisted layering violations no longer occur; delete them from KNOWN_VIOLATIONS in "
        "tests/test_layering.py so that they cannot come back:\n  " + "\n  ".join(gone))


def test_the_checker_finds_each_kind_of_violation() -> None:
    lower = """
class Actor:
    _keep = 1

    def _hook(self):
        self._host = None

    @abstractmethod
    def _implement_me(self): ...
"""
    upper = """
import journal.sqlite_wal as wal
from persistence.delivery import _Delivery
from . import _helpers

def f(actor):
    import spark_bridge
    from persistence import plugins
    actor._host.router
    wal._dms_held(3)
    plugins._schemes.get

class Mine(Actor):
    def _implement_me(self):
        return self._implement_me

    def _hook(self):
        self._keep = 2
        return super()._hook()

class Other:
    def _own(self):
        self._mine = 1
"""
    hierarchy = _Hierarchy([*_classes("journal", ast.parse(lower)), *_classes("actors", ast.parse(upper))])
    found = _Checker("actors/x.py", "actors.x", "actors", hierarchy).check(ast.parse(upper))
    assert found == {
        "actors/x.py: imports persistence.delivery._Delivery",
        "actors/x.py: upward import of persistence.delivery",
        "actors/x.py: upward import of spark_bridge",
        "actors/x.py: upward import of persistence",
        "actors/x.py: uses journal.sqlite_wal._dms_held",
        "actors/x.py: uses persistence.plugins._schemes",
        "actors/x.py: uses private _host of journal",
        "actors/x.py: Mine overrides private _hook of journal",
        "actors/x.py: Mine uses private _hook of journal",
        "actors/x.py: Mine sets private _keep of journal",
    }
