#!/bin/sh
# h20-common: one agent's TRANSFER cycle (cycle.py) of main, this branch and h20-transfer (directory
# reuse, not merged; its llic/ from `git archive h20-transfer llic | tar -x -C $HT`), in turn,
# ROUNDS times, without and then with disk activity beside it (diskload.sh: 50 MB written with
# fsync and removed, over and over, as the pool's transfers and logs do), under nice.
# Usage (repository root): sh docs/bench/llic-runs/h20-common/cycle.sh MAIN BRANCH HT ROUNDS >> cycle.jsonl
here=$(dirname "$0")
py=/work/main/.venv/bin/python
for disk in 0 1; do
  if [ "$disk" = 1 ]; then nice -n 10 sh "$here/diskload.sh" & load=$!; sleep 1; fi
  for round in $(seq "$4"); do
    for code in "$1" "$2" "$3"; do
      CYCLE_DISK_LOAD=$disk PYTHONPATH=$code nice -n 10 $py "$here/cycle.py" TRANSFER 500 true
      CYCLE_DISK_LOAD=$disk PYTHONPATH=$code nice -n 10 $py "$here/cycle.py" TRANSFER 300 common
    done
  done
  if [ "$disk" = 1 ]; then kill "$load"; wait "$load" 2>/dev/null; fi
done
