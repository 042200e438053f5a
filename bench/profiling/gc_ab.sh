#!/bin/bash
# The entity host at several gen-0 GC thresholds, alternated (PROFILE.md §16): edits actors/boot.py's
# GC_THRESHOLDS in place for each run and restores the file at the end. Needs py-spy's site dir for the GC timer.
#   bench/profiling/gc_ab.sh ROUNDS THRESHOLD...      e.g. bench/profiling/gc_ab.sh 2 20_000 100_000
cd "$(dirname "$0")/../.." || exit 1
rounds=$1; shift
mkdir -p /tmp/prof
cp actors/boot.py /tmp/boot.py.orig
trap 'cp /tmp/boot.py.orig actors/boot.py' EXIT
for _ in $(seq "$rounds"); do for t in "$@"; do
  sed -i "s/^GC_THRESHOLDS = .*/GC_THRESHOLDS = ($t, 20, 20)/" actors/boot.py
  rm -f /tmp/prof/gc-*.txt
  out=$(PYTHONPATH=$PWD:$PWD/bench/profiling/site SPY_OUT= timeout 300 .venv/bin/python bench/profiling/ent_spy.py \
        --entities 10000 --messages 200000 --rounds 1 --base multiproc 2>&1 | grep -E "applied/s|host pid")
  hp=$(echo "$out" | grep -o "host pid [0-9]*" | cut -d" " -f3); out=$(echo "$out" | grep applied)
  g=$(tail -1 "/tmp/prof/gc-$hp.txt" | cut -d" " -f2-4)
  echo "$t | ${out#*: } | $g | load $(cut -d' ' -f1 /proc/loadavg)"
done; done
