"""Run torture histories: `python -m tests.torture.runner --seed S --histories N --journal sqlite|postgres|both`.

History k of a run uses seed S + k (printed on its line); `--seed S+k --histories 1` replays it alone
(with the same --journal, --ops and --spark). Exit 1 if any history broke a guarantee.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any

from actors.system import kill_tagged, tagged_pids
from tests.torture import checker, ops
from tests.torture.world import World

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PG_URL = os.environ.get("REPRISE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class Summary(checker.Verdict):
    """Figures over all histories of a run (a Verdict's counts, summed)."""

    histories: int = 0
    ops: int = 0
    failed: list[str] = field(default_factory=list)
    note_counts: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        """The summary line."""
        return (f"histories={self.histories} ops={self.ops} acknowledged={self.acknowledged} lost={self.lost} "
                f"duplicates={self.duplicates} out-of-order={self.out_of_order} inconsistent={self.inconsistent} "
                f"unclear-errors={self.unclear} leftover-processes={self.leftovers} "
                f"orphans-after-admin-kill={self.orphans} failed={len(self.failed)}")


def run_history(seed: int, journal: str, token: str, ops_range: tuple[int, int], spark_session: Any,
                spark_fraction: float, exclude: frozenset[str] = frozenset()) -> tuple[checker.Verdict, list[str]]:
    """One history: start, run its random operations, check; never leaves a process behind."""
    rng = random.Random(seed)
    spark = spark_session() if spark_session is not None and rng.random() < spark_fraction else None
    n_ops = rng.randrange(ops_range[0], ops_range[1] + 1)
    workdir = tempfile.mkdtemp(prefix=f"torture-{seed}-")
    w = World(journal, workdir, token, seed, pg_url=PG_URL if journal == "postgres" else None, spark=spark)
    try:
        w.start()
        for _ in range(n_ops):
            name = ops.choose(rng, journal, spark is not None, exclude)
            w.ops.append(name)
            if w.system is None:
                w.start()
            try:
                ops.OPS[name][0](w, rng)
            except Exception as exc:  # noqa: BLE001 - an operation crashing is a finding, not the end of the run
                w.note_error(f"op {name}", exc)
                w.findings.append(f"op {name} raised {type(exc).__name__}: {exc}")
        applied = checker.applied_state(w)
        verdict = checker.check(w, applied)
    except Exception as exc:  # noqa: BLE001 - the harness reports, then cleans up
        verdict = checker.Verdict()
        verdict.fail("the history could not be completed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    finally:
        w.cleanup()
    return verdict, w.ops


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(f"stopped by signal {signum}")  # unwinds through run()'s finally: the systems are killed


def main(argv: list[str] | None = None) -> int:
    """Run the histories and print one line each plus a summary; 1 on any failure."""
    signal.signal(signal.SIGTERM, _terminate)
    p = argparse.ArgumentParser(prog="python -m tests.torture.runner", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1, help="history k uses seed SEED + k")
    p.add_argument("--histories", type=int, default=200)
    p.add_argument("--journal", choices=["sqlite", "postgres", "both"], default="both",
                   help="both: even histories on SQLite, odd ones on PostgreSQL")
    p.add_argument("--ops", default="5-20", help="operations per history, MIN-MAX")
    p.add_argument("--spark", type=float, default=0.1, help="fraction of histories that feed from Spark (0: none)")
    p.add_argument("--exclude", default="", help="operations never chosen, comma-separated (to tell bugs apart)")
    args = p.parse_args(argv)
    exclude = frozenset(x for x in args.exclude.split(",") if x)
    unknown = exclude - set(ops.OPS)
    if unknown:
        p.error(f"--exclude: unknown operations {sorted(unknown)}; they are {', '.join(ops.OPS)}")
    lo, _, hi = args.ops.partition("-")
    ops_range = (int(lo), int(hi or lo))
    summary = run(args.seed, args.histories, args.journal, ops_range, args.spark, exclude=exclude)
    return 1 if summary.failed else 0


def run(seed: int, histories: int, journal: str, ops_range: tuple[int, int] = (5, 20), spark: float = 0.1,
        token: str | None = None, out=sys.stdout, exclude: frozenset[str] = frozenset()) -> Summary:
    """Run `histories` histories from `seed`; print a line per history and the summary."""
    token = token or f"reprise-torture-{uuid.uuid4().hex[:10]}"
    session: list[Any] = []

    def spark_session() -> Any:
        if not session:
            from spark_bridge import local_session
            session.append(local_session("reprise-torture", "local[2,3]", import_paths=(ROOT,),
                                         **{"spark.ui.showConsoleProgress": "false"}))
        return session[0]

    summary = Summary()
    try:
        for k in range(histories):
            s = seed + k
            kind = journal if journal != "both" else ("sqlite", "postgres")[s % 2]
            started = time.monotonic()
            verdict, names = run_history(s, kind, token, ops_range, spark_session if spark > 0 else None, spark,
                                         exclude)
            stray = tagged_pids(token)
            if stray:
                verdict.leftovers += 1
                verdict.fail("processes left behind after the history", stray)
                kill_tagged(token)
            summary.histories += 1
            summary.ops += len(names)
            for name in checker.COUNTS:
                setattr(summary, name, getattr(summary, name) + getattr(verdict, name))
            for note in verdict.notes:
                key = note.split(":")[0][:80]
                summary.note_counts[key] = summary.note_counts.get(key, 0) + 1
            status = "ok" if not verdict.failures else "FAIL"
            print(f"history seed={s} journal={kind} ops={len(names)} acked={verdict.acknowledged} "
                  f"lost={verdict.lost} dup={verdict.duplicates} ooo={verdict.out_of_order} "
                  f"unclear={verdict.unclear} left={verdict.leftovers} {time.monotonic() - started:.1f}s {status}",
                  file=out, flush=True)
            if verdict.failures or verdict.notes:
                print(f"  ops: {' '.join(names)}", file=out)
            for n in verdict.notes:
                print(f"  . {n}", file=out)
            if verdict.failures:
                summary.failed.append(f"seed={s} journal={kind}")
                for f in verdict.failures:
                    print(f"  - {f}", file=out)
                flags = f" --spark {spark}" if spark else " --spark 0"
                if exclude:
                    flags += f" --exclude {','.join(sorted(exclude))}"
                print(f"  replay: python -m tests.torture.runner --seed {s} --histories 1 --journal {kind} "
                      f"--ops {ops_range[0]}-{ops_range[1]}{flags}", file=out, flush=True)
    finally:
        kill_tagged(token)
        if session:
            session[0].stop()
    print("SUMMARY " + summary.line(), file=out)
    if summary.note_counts:
        print("notes: " + "; ".join(f"{k} x{n}" for k, n in sorted(summary.note_counts.items())), file=out)
    if summary.failed:
        print("FAILED histories: " + ", ".join(summary.failed), file=out)
    return summary


if __name__ == "__main__":
    sys.exit(main())
