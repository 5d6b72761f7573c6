#!/bin/sh
# main's llic against this branch's on the pool, run by run (each `bench/llic common --runs 1
# --peers llic,dask`, so llic goes first in every run; each run takes the shared lock itself):
# main, branch, branch, main, main, branch. MAIN: a tree of main's code (`git archive main`)
# with the .venv symlink; BRANCH: this worktree. Records go to ab-main/ and ab-branch/.
# Usage: sh docs/bench/llic-runs/h20-common/ab.sh MAIN BRANCH
here=$(cd "$(dirname "$0")" && pwd)
for who in main branch branch main main branch; do
  if [ "$who" = main ]; then tree=$1; else tree=$2; fi
  (cd "$tree" && PYTHONPATH=$tree .venv/bin/python bench/llic common --runs 1 --peers llic,dask \
    --run-limit 180 --out "$here/ab-$who" --keep-logs "/tmp/h20c/logs-ab-$who")
done
