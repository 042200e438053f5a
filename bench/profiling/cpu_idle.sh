#!/bin/bash
# The machine's idle CPU share every 10 s from /proc/stat, until killed (§35: beside a suite run).
#   bench/profiling/cpu_idle.sh > /tmp/cpu.log & make test; kill %1
#   awk -F= '{gsub("%","",$2); s+=$2; n++} END {print "mean idle", s/n}' /tmp/cpu.log
prev=($(head -1 /proc/stat))
while true; do
    sleep 10
    cur=($(head -1 /proc/stat))
    total=0
    for i in 1 2 3 4 5 6 7 8; do total=$((total + cur[i] - prev[i])); done
    idle=$((cur[4] - prev[4] + cur[5] - prev[5]))
    echo "$(date +%T) idle=$((100 * idle / total))%"
    prev=("${cur[@]}")
done
