#!/bin/sh
# main's and this branch's code, started together, per kind (nice -n 10): one JSON line each
for round in 1 2; do
  for kind in plain private blast; do
    l0=$(cut -d' ' -f1 /proc/loadavg)
    PYTHONPATH=/work/main nice -n 10 /work/main/.venv/bin/python one.py 2000 $kind 2>/dev/null | sed "s/^{/{\"code\": \"main\", \"round\": $round, \"load_before\": $l0, /" >> pairs.jsonl &
    PYTHONPATH=/work/wt-h20-private nice -n 10 /work/main/.venv/bin/python one.py 2000 $kind 2>/dev/null | sed "s/^{/{\"code\": \"h20-private\", \"round\": $round, \"load_before\": $l0, /" >> pairs.jsonl &
    wait
  done
done
