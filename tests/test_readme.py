"""The README's code runs as written: its blocks are extracted and run, so it cannot drift from the code."""

from __future__ import annotations

import ast
import glob
import inspect
import os
import re
import subprocess
import sys
import tomllib

import pytest

import actors
from actors.topology import loads
from tests.waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()


def blocks(language: str) -> list[str]:
    """The README's fenced code blocks in `language`, in order."""
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def processes_started_in(directory: str) -> list[int]:
    """Pids of python processes whose working directory is `directory` (an actor system keeps its creator's)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.readlink(f"/proc/{entry}/cwd") == directory and b"python" in open(
                    f"/proc/{entry}/cmdline", "rb").read():
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def run_block_as_script(name: str, tmp_path) -> None:
    """Save the README's python block whose first line is `# <name>: ...` as <name> in tmp_path, run it there
    with this checkout's packages, and check it exits 0 and leaves no process behind."""
    (block,) = [b for b in blocks("python") if b.startswith(f"# {name}")]
    (tmp_path / name).write_text(block)
    where = str(tmp_path.resolve())
    try:
        # (TMPDIR: the block's tempfile.mkdtemp() journals go in tmp_path, not in /tmp for good)
        run = subprocess.run([sys.executable, name], cwd=where, capture_output=True, text=True, timeout=90,
                             env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": where})
        assert run.returncode == 0, run.stderr
        wait_for(lambda: not processes_started_in(where), timeout=15)
    finally:
        for pid in processes_started_in(where):
            os.kill(pid, 9)


@pytest.fixture
def tour_dir(tmp_path):
    """A directory holding the README's tour, saved as tour.py as its first line says."""
    tour = blocks("python")[0]
    assert tour.startswith("# tour.py"), "the tour's first line names the file it is saved as"
    (tmp_path / "tour.py").write_text(tour)
    yield str(tmp_path.resolve())
    for pid in processes_started_in(str(tmp_path.resolve())):
        os.kill(pid, 9)


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_the_tour_runs_verbatim_as_a_script(tour_dir) -> None:
    run = subprocess.run([sys.executable, "tour.py"], cwd=tour_dir, capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr
    # The system shut down with the `with` block: nothing it started is left.
    wait_for(lambda: not processes_started_in(tour_dir), timeout=15)


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_importing_the_tour_starts_nothing(tour_dir) -> None:
    run = subprocess.run([sys.executable, "-c", "import tour; print(tour.Account.__name__)"], cwd=tour_dir,
                         capture_output=True, text=True, timeout=30)
    assert (run.returncode, run.stdout.strip()) == (0, "Account"), run.stderr
    assert not processes_started_in(tour_dir)


def test_the_topology_block_loads_and_matches_the_shipped_example() -> None:
    (text,) = blocks("toml")
    topo = loads(text, base_dir=ROOT)
    assert [e.path for e in topo.entries] == ["/user/echo", "/user/echoes"]
    with open(os.path.join(ROOT, "examples/topologies/echo.toml"), "rb") as f:
        shipped = tomllib.load(f)
    shown = tomllib.loads(text)
    # Every setting the README shows is the shipped example's (which has a few more).
    for key, value in shown["system"].items():
        assert shipped["system"][key] == value, key
    for kind in ("actor", "entities"):
        for shown_entry, shipped_entry in zip(shown[kind], shipped[kind], strict=True):
            assert shown_entry.items() <= shipped_entry.items(), (kind, shown_entry)


def _readme_signature(call: str) -> dict[str, str]:
    """The keyword options and defaults the README's Configuration section gives for `call(`."""
    start = README.index(f"`{call}(")
    text = README[start + len(call) + 2:README.index(")`", start)]
    options = {}
    for part in re.split(r",\s*", text.replace("\n", " ")):
        part = part.strip().lstrip("*").strip()
        if "=" in part:
            name, default = part.split("=", 1)
            options[name.strip()] = default.strip()
    return options


@pytest.mark.parametrize("call, function", [
    ("actors.start", actors.start),
    ("system.spawn", actors.System.spawn),
])
def test_the_configuration_section_matches_the_signatures(call, function) -> None:
    shown = _readme_signature(call)
    assert shown, f"the README documents no options for {call}"
    parameters = inspect.signature(function).parameters
    for name, default in shown.items():
        assert name in parameters, f"README documents {call}({name}=...), which does not exist"
        assert parameters[name].default == ast.literal_eval(default), (
            f"README says {call}({name}={default}), the code's default is {parameters[name].default!r}")


def named_tests() -> list[tuple[str, str, str]]:
    """(reference, file, test name or "") for each test file and test the README names as a guarantee's check.

    `::test_x` names a test of the last file named before it (as the guarantee tables abbreviate them)."""
    found, last = [], ""
    for ref in re.findall(r"`(tests/[^`]*|::test_[^`]*)`", README):
        if ref.startswith("tests/"):
            last, _, name = ref.partition("::")
        else:
            name = ref[2:]
        found.append((ref, last, name.split("[")[0]))
    return found


def _text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_every_test_the_readme_names_exists() -> None:
    """A guarantee names the test that checks it: renaming or deleting that test must not leave the README pointing
    at nothing."""
    refs = named_tests()
    assert len(refs) > 50, "the README's guarantee tables name their tests as `tests/...py::test_...`"
    missing = []
    for ref, path, name in refs:
        matches = glob.glob(os.path.join(ROOT, path)) if "*" in path else [os.path.join(ROOT, path)]
        if not matches or not all(os.path.exists(p) for p in matches):
            missing.append(f"{ref}: no {path}")
        elif name and not any(re.search(rf"^\s*(async )?def {re.escape(name)}\(", _text(p), re.M)
                              for p in matches if p.endswith(".py")):
            missing.append(f"{ref}: {path} defines no {name}")
    assert missing == []
