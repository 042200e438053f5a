"""The benchmark runner: runs every bench/*.py with --json, writes RESULTS.md and a PNG chart.

    python -m bench [--only NAME]... [--out DIR] [--arg NAME:ARG]... [--timeout SECONDS]

It lives in the checkout, not in the installed package (it needs matplotlib and the benchmarks' peers);
`reprise bench` runs it from a checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from typing import Any

PROG = "python -m bench"
BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
# Modules of bench/ that are not benchmarks (besides the _private ones).
NOT_BENCHMARKS = frozenset({"actors_fixtures", "runner"})

Rows = list[tuple[str, str, float]]


class BenchError(Exception):
    """Bad input or no results: one line plus a hint; `code` 2 for bad input, 1 otherwise."""

    def __init__(self, message: str, hint: str | None = None, code: int = 1) -> None:
        super().__init__(message)
        self.hint = hint
        self.code = code


class _Skip(Exception):
    """A benchmark that cannot be run here (no --json option, or it failed)."""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The runner's arguments; `prog` names the command in usage and errors."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", metavar="NAME",
                   help="run only this benchmark module (repeatable), e.g. transport")
    p.add_argument("--out", default=None, help="output directory (default: bench/)")
    p.add_argument("--arg", action="append", default=[], metavar="NAME:ARG",
                   help="extra argument for one benchmark, e.g. transport:--messages=2000 (repeatable)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per benchmark")
    p.add_argument("--bench-dir", help=argparse.SUPPRESS)  # for tests: a package of fake benchmarks
    return p


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run the benchmarks named on the command line; returns the exit code."""
    args = build_parser(prog).parse_args(argv)
    try:
        return run(args)
    except BenchError as e:
        suffix = f" (hint: {e.hint})" if e.hint else ""
        print(f"{prog}: error: {e}{suffix}", file=sys.stderr)
        return e.code


def run(args: argparse.Namespace) -> int:
    """Run the benchmarks `args` select, write RESULTS.md and results.png; raises BenchError."""
    bench_dir = os.path.abspath(args.bench_dir or BENCH_DIR)
    if not os.path.isfile(os.path.join(bench_dir, "__init__.py")):
        raise BenchError(f"{bench_dir} is not a benchmark package", "run from a Reprise checkout", code=2)
    names = sorted(f[:-3] for f in os.listdir(bench_dir)
                   if f.endswith(".py") and not f.startswith("_") and f[:-3] not in NOT_BENCHMARKS)
    unknown = set(args.only or ()) - set(names)
    if unknown:
        raise BenchError(f"no benchmark(s) {sorted(unknown)} in {bench_dir}", f"choose from {names}", code=2)
    extra: dict[str, list[str]] = {}
    for spec in args.arg:
        name, sep, value = spec.partition(":")
        if not sep or name not in names:
            raise BenchError(f"--arg {spec!r} is not NAME:ARG for a benchmark", f"benchmarks: {names}", code=2)
        extra.setdefault(name, []).append(value)
    out_dir = os.path.abspath(args.out or bench_dir)
    os.makedirs(out_dir, exist_ok=True)
    results: dict[str, Rows] = {}
    notes: list[str] = []
    for name in args.only or names:
        print(f"running {name} ...", flush=True)
        started = time.monotonic()
        try:
            doc = _run_bench(bench_dir, name, extra.get(name, []), args.timeout)
        except _Skip as e:
            notes.append(f"{name}: skipped ({e})")
            print(f"  skipped: {e}", flush=True)
            continue
        results[name] = bench_rows(doc)
        print(f"  {len(results[name])} figures in {time.monotonic() - started:.0f} s", flush=True)
    if not results:
        raise BenchError("no benchmark produced results", "; ".join(notes) or None)
    chart = os.path.join(out_dir, "results.png")
    write_chart(results, chart)
    md = os.path.join(out_dir, "RESULTS.md")
    with open(md, "w") as f:
        f.write(render_results(results, notes, os.path.basename(chart)))
    print(f"wrote {md} and {chart}")
    return 0


def _run_bench(bench_dir: str, name: str, extra: list[str], timeout: float) -> Any:
    """Run one benchmark module with --json; returns its parsed JSON."""
    package = os.path.basename(bench_dir)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(bench_dir), *filter(None, [os.environ.get("PYTHONPATH")])]))
    cmd = [sys.executable, "-m", f"{package}.{name}"]
    cwd = os.path.dirname(bench_dir)
    helped = subprocess.run([*cmd, "--help"], timeout=60, cwd=cwd, env=env, capture_output=True, text=True)
    if helped.returncode != 0 or "--json" not in helped.stdout:
        raise _Skip("it has no --json option")
    # Some benchmarks take `--json FILE`, others print JSON on stdout with a bare `--json`.
    to_file = re.search(r"--json\s+[A-Z]", helped.stdout) is not None
    with tempfile.TemporaryDirectory(prefix="reprise-bench-") as tmp:
        target = os.path.join(tmp, f"{name}.json")
        argv = [*cmd, "--json", target] if to_file else [*cmd, "--json"]
        try:
            done = subprocess.run([*argv, *extra], timeout=timeout, cwd=cwd, env=env, capture_output=True,
                                  text=True)
        except subprocess.TimeoutExpired:
            raise _Skip(f"timed out after {timeout:.0f} s") from None
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise _Skip(f"exit code {done.returncode}: {tail}")
        if to_file:
            with open(target) as f:
                return json.load(f)
    for line in reversed(done.stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    raise _Skip("it printed no JSON")


def bench_rows(doc: Any) -> Rows:
    """(system, measurement, rate) rows from a benchmark's JSON, whichever of the two shapes it has."""
    rows: Rows = []
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        for r in doc["results"]:
            if isinstance(r, dict) and {"system", "measurement", "rate"} <= set(r):
                rows.append((str(r["system"]), str(r["measurement"]), float(r["rate"])))
    elif isinstance(doc, dict):
        for system, figures in doc.items():
            if isinstance(figures, dict):
                rows += [(system, key.removesuffix("_per_s").replace("_", " ") + "/s", float(value))
                         for key, value in figures.items()
                         if key.endswith("_per_s") and isinstance(value, int | float)]
    return rows


def render_results(results: dict[str, Rows], notes: list[str], chart: str) -> str:
    """bench/RESULTS.md: one table per benchmark, then notes and the chart."""
    lines = ["# Benchmark results", "",
             f"Written by `{PROG}` on {time.strftime('%Y-%m-%d %H:%M')}: python {platform.python_version()}, "
             f"{os.cpu_count()} cpus, {platform.platform()}.", ""]
    for name, rows in results.items():
        lines += [f"## {name}", "", "| system | measurement | per second |", "|---|---|---:|"]
        lines += [f"| {system} | {measurement} | {rate:,.0f} |" for system, measurement, rate in rows]
        lines.append("")
    if notes:
        lines += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    lines += [f"![Reprise vs its peers]({chart})", ""]
    return "\n".join(lines)


def write_chart(results: dict[str, Rows], path: str) -> None:
    """A PNG with one horizontal bar chart (log scale) per benchmark; Reprise's bars stand out."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and in tests
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    # Long measurement names are wrapped, so the bars keep most of the width.
    wrap = [[textwrap.fill(f"{system}: {measurement}", 48) for system, measurement, _ in rows]
            for rows in results.values()]
    heights = [max(1.5, 0.3 * sum(label.count("\n") + 1 for label in labels) + 1) for labels in wrap]
    fig, axes = plt.subplots(len(results), 1, figsize=(11, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, labels, (name, rows) in zip(axes[:, 0], wrap, results.items(), strict=True):
        rates = [max(rate, 1e-9) for _, _, rate in rows]
        # (bench.entities names its table run "EntityTable <base>": Reprise's too)
        colors = ["tab:blue" if system.lower().startswith(("reprise", "entitytable")) else "tab:gray"
                  for system, _, _ in rows]
        ax.barh(range(len(rows)), rates, color=colors)
        ax.set_yticks(range(len(rows)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # labelled minor ticks overlap on short ranges
        ax.bar_label(ax.containers[0], labels=[f"{r:,.0f}" for r in rates], fontsize=7, padding=2)
        ax.set_xlim(right=max(rates) * 4)  # room for the value labels
        ax.set_title(name)
        ax.set_xlabel("per second (log scale; Reprise in blue)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
