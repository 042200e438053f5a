"""`python -m bench` (and `reprise bench` in a checkout): runs benchmark modules with --json, writes
RESULTS.md and a PNG chart."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import actors.cli
from actors.cli import main
from bench import runner
from bench.runner import bench_rows

pytestmark = pytest.mark.timeout(120)

FLAG_STYLE = '''
import argparse, json
p = argparse.ArgumentParser()
p.add_argument("--json", action="store_true")
p.add_argument("--n", type=int, default=1)
a = p.parse_args()
print("some human text")
print(json.dumps({"reprise": {"msgs_per_s": 1000.0 * a.n, "rtt_us": 5}, "raw": {"msgs_per_s": 10.0}}))
'''
FILE_STYLE = '''
import argparse, json
p = argparse.ArgumentParser()
p.add_argument("--json", help="write results to this file")
a = p.parse_args()
json.dump({"results": [{"system": "reprise sqlite", "measurement": "write", "rate": 50.0}]}, open(a.json, "w"))
'''
NO_JSON = "import sys; sys.exit(0 if '--help' in sys.argv else 1)\n"


@pytest.fixture
def fake_bench(tmp_path):
    d = tmp_path / "fakebench"
    d.mkdir()
    (d / "__init__.py").write_text("")
    (d / "flag.py").write_text(FLAG_STYLE)
    (d / "tofile.py").write_text(FILE_STYLE)
    (d / "plain.py").write_text(NO_JSON)
    return d


def test_bench_runs_both_json_styles_and_writes_the_report(fake_bench, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    code = main(["bench", "--bench-dir", str(fake_bench), "--out", str(out), "--arg", "flag:--n=3"])
    assert code == 0, capsys.readouterr().err
    md = (out / "RESULTS.md").read_text()
    assert "| reprise | msgs/s | 3,000 |" in md and "| raw | msgs/s | 10 |" in md
    assert "| reprise sqlite | write | 50 |" in md
    assert "plain: skipped (it has no --json option)" in md
    assert (out / "results.png").read_bytes().startswith(b"\x89PNG")


def test_bench_input_errors(fake_bench, capsys) -> None:
    assert main(["bench", "--bench-dir", str(fake_bench), "--only", "nope"]) == 2
    assert main(["bench", "--bench-dir", str(fake_bench), "--arg", "flag"]) == 2
    assert main(["bench", "--bench-dir", str(fake_bench), "--only", "plain"]) == 1
    assert capsys.readouterr().err.count("reprise: error:") == 3


def test_python_m_bench_runs_the_runner_with_its_own_error_format(fake_bench, tmp_path) -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(runner.__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    done = subprocess.run([sys.executable, "-m", "bench", "--bench-dir", str(fake_bench), "--only", "nope"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("python -m bench: error: no benchmark(s) ['nope']"), done.stderr
    assert "(hint: choose from ['flag', 'plain', 'tofile'])" in done.stderr
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "bench", "--bench-dir", str(fake_bench), "--out", str(out),
                           "--only", "tofile"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "| reprise sqlite | write | 50 |" in (out / "RESULTS.md").read_text()


def test_reprise_bench_passes_every_option_to_the_runner(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    assert e.value.code == 0
    assert "usage: reprise bench [-h] [--only NAME]" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["bench", "--no-such-option"])
    assert e.value.code == 2
    assert "reprise bench: error: unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_reprise_bench_outside_a_checkout_says_how_to_run_the_benchmarks(tmp_path) -> None:
    # The installed layout: the four packages in site-packages, no bench/ next to them.
    root = os.path.dirname(os.path.dirname(os.path.abspath(actors.cli.__file__)))
    site = tmp_path / "site-packages"
    for package in ("actors", "journal", "persistence", "spark_bridge"):
        shutil.copytree(os.path.join(root, package), site / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(site))
    done = subprocess.run([sys.executable, "-m", "actors.cli", "bench", "--only", "transport"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "reprise: error: the benchmarks are not installed with the package" in done.stderr
    assert "run `python -m bench` (or `make bench`)" in done.stderr


@pytest.mark.multiproc
def test_the_real_transport_benchmark_at_a_tiny_size(tmp_path, capsys) -> None:
    args = ["--messages=500", "--rally=20", "--raw-messages=50", "--rounds=1"]
    code = main(["bench", "--only", "transport", "--out", str(tmp_path),
                 *[x for a in args for x in ("--arg", f"transport:{a}")]])
    assert code == 0, capsys.readouterr().err
    assert "raw_thespian" in (tmp_path / "RESULTS.md").read_text()


def test_rows_ignore_non_rates() -> None:
    assert bench_rows({"a": {"x_per_s": 2, "rtt_us": 3}, "n": 5}) == [("a", "x/s", 2.0)]
    assert bench_rows([1, 2]) == []
