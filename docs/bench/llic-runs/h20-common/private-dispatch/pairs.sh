#!/bin/sh
# main's and this branch's code started together, per kind (nice -n 10): one JSON line each, with
# the master's and its children's (agents' and tasks') CPU seconds (cpu.py, from h20-private).
# Usage (this directory): sh pairs.sh MAIN BRANCH ROUNDS TASKS >> pairs.jsonl
for round in $(seq "$3"); do
  for kind in blast plain_transfer; do
    l0=$(cut -d' ' -f1 /proc/loadavg)
    PYTHONPATH=$1 nice -n 10 /work/main/.venv/bin/python cpu.py "$4" $kind 2>/dev/null | grep "^{" | sed "s/^{/{\"code\": \"main\", \"round\": $round, \"load_before\": $l0, /" &
    PYTHONPATH=$2 nice -n 10 /work/main/.venv/bin/python cpu.py "$4" $kind 2>/dev/null | grep "^{" | sed "s/^{/{\"code\": \"h20-common\", \"round\": $round, \"load_before\": $l0, /" &
    wait
  done
done
