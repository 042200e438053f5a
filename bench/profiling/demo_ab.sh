#!/bin/bash
# Alternated demo runs: every tree (a `git archive` copy) once per round, the order rotated by one per round, each
# with demo_watch.py (no profiler) next to it. Results: /tmp/pd-ab/NAME.log (rows/s, load) and NAME-ROUND-TREE.out*.
#   PYTHON=/path/to/python bench/profiling/demo_ab.sh NAME ROUNDS TREE... ; python bench/profiling/demo_cpu.py /tmp/pd-ab/NAME
name=$1; rounds=$2; shift 2
watch=$(cd "$(dirname "$0")" && pwd)/demo_watch.py
trees=("$@"); k=${#trees[@]}
mkdir -p /tmp/pd-ab; log=/tmp/pd-ab/$name.log
for i in $(seq 1 "$rounds"); do
  for j in $(seq 0 $((k - 1))); do
    t=${trees[$(( (i - 1 + j) % k ))]}
    l0=$(cut -d' ' -f1 /proc/loadavg)
    tn=$(basename "$t"); tag=pdq${name}x${i}x${tn}q
    f=/tmp/pd-ab/$name-$i-$tn.out
    (cd "$t" && DEMO_TAG=$tag PYTHONPATH=$t ${PYTHON:-python} "$watch" - "/tmp/pd-ab/$name-$i-$tn" > "$f.watch" 2>&1) &
    wp=$!
    (cd "$t" && PYTHONPATH=$t ${PYTHON:-python} -m examples.demo --transactions 200000 --no-chaos --tag "$tag" > "$f" 2>&1)
    wait $wp
    l1=$(cut -d' ' -f1 /proc/loadavg)
    r=$(grep -aoE "\(([0-9,]+) rows/s" "$f" | tr -d '(,' | cut -d' ' -f1)
    echo "round=$i tree=$tn load=$l0/$l1 rows_s=$r ok=$(grep -acE '^OK' "$f")" >> "$log"
  done
done
