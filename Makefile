# The README's two commands: `make demo` and `make test`. Both bootstrap .venv from pyproject.toml.
PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.reprise-installed
PY     := $(VENV)/bin/python

.PHONY: venv test demo lint bench clean torture bytecode

# The stamp is older than pyproject.toml when dependencies changed: reinstall then.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,spark,postgres,bench]'
	touch $(STAMP)

venv: $(STAMP)

# Three workers, one test file each at a time: most of the suite waits on subprocesses, sockets and Spark (the
# two cores are ~55% idle in a serial run, ~18% with two workers, 4-7% with three), and a file's fixtures (a
# SparkSession, a cluster) stay in one worker. The longest files go first (tests/conftest.py's LONGEST_FILES, with
# --no-loadscope-reorder). Three failed two tests once under their load, two races found and fixed since
# (bench/PROFILE.md §35, §36). TEST_WORKERS=0 runs the suite serially.
TEST_WORKERS ?= 3

test: $(STAMP) bytecode
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The demo's Spark JVM maps its classes from an archive built by the first run (spark_bridge.class_archive).
demo: $(STAMP) bytecode
	$(PY) -m examples.demo --class-archive $(VENV)/spark-classes.jsa

# The project's modules compiled once, beside their sources (__pycache__, ignored by git). Python writes these
# itself, except where PYTHONDONTWRITEBYTECODE is set (as on this workplace's machines): then every process that
# imports them compiled them again, in every actor system's boot, host, CLI run and Spark worker; the suite
# took ~20% longer so (bench/PROFILE.md §35). Stale ones are recompiled here; an unchanged tree costs a stat a file.
bytecode: $(STAMP)
	$(PY) -m compileall -q -j 0 actors persistence journal spark_bridge examples bench tests

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info

# Random, seeded histories of user operations and faults against real systems; see tests/torture/runner.py.
SEED      ?= 1
HISTORIES ?= 200
JOURNAL   ?= both
torture: $(STAMP)
	$(PY) -m tests.torture.runner --seed $(SEED) --histories $(HISTORIES) --journal $(JOURNAL)
