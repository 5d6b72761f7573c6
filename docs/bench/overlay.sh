#!/usr/bin/env bash
# Overlay benchmark: the runs whose results are in docs/results.md. Run from the repo root
# after `make venv`; each writes docs/bench/overlay-*.json.
set -euo pipefail
poold=.venv/bin/poold
$poold simulate overlay --nodes 1000 --seed 1 > docs/bench/overlay-1000.json
$poold simulate overlay --nodes 1000 --seed 1 --churn 0.2 > docs/bench/overlay-1000-churn20.json
$poold simulate overlay --nodes 10000 --seed 1 --join-interval 0.05 --settle 120 --steady 120 \
    > docs/bench/overlay-10000.json
$poold simulate overlay --nodes 10000 --seed 1 --join-interval 0.05 --settle 120 --steady 120 \
    --churn 0.2 --repair 180 > docs/bench/overlay-10000-churn20.json
