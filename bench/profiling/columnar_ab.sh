#!/bin/bash
# PROFILE.md §18: the entity bench (today's IdempotentReceiver host) alternated with the columnar prototype's
# record layouts, PAIRS times (default 2), in one run. Run from the project root.
#   bench/profiling/columnar_ab.sh [PAIRS]
PY=${PYTHON:-.venv/bin/python}
for i in $(seq 1 "${1:-2}"); do
  echo "== pair $i $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  PYTHONPATH=$PWD timeout 600 "$PY" -m bench.entities --entities 10000 --messages 200000 --rounds 3 --base multiproc --kind receiver | tail -1
  for r in entity chunk columns none; do
    RECORDS=$r PYTHONPATH=$PWD timeout 600 "$PY" bench/profiling/columnar_proto.py 10000 200000 2000 3
  done
done
