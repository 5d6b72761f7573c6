# Two entry points: `make demo` and `make test`. Both set up everything they need on a fresh
# Debian 12 machine (run as root): system packages, a virtualenv, the HTCondor sandbox root.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SANDBOX := deploy/sandbox
STAMP := $(VENV)/.installed

.PHONY: demo test test-unit test-htcondor lint venv sandbox clean constraints dist

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 11)' 2>/dev/null || { \
		echo "installing python3 (>= 3.11) with venv from Debian"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv python3-pip; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,sim,metrics]' -c constraints.txt
	@touch $@

# constraints.txt pins every package of the tested venv: `pip install -c constraints.txt ...`
# reproduces it. Regenerate after changing a dependency in pyproject.toml (in a venv made without
# the old pins: rm -rf .venv; make constraints).
constraints:
	@test -x $(PY) || { $(PYTHON) -m venv $(VENV) && $(PY) -m pip install -q --upgrade pip; }
	$(PY) -m pip install -q -e '.[test,sim,metrics]'
	{ echo "# Versions the test suite ran with (make constraints regenerates this file)."; \
	  echo "# pip install -c constraints.txt condor_selforg-*.whl"; \
	  $(PY) -m pip freeze --exclude-editable | LC_ALL=C sort -f; } > constraints.txt

# The wheel (with the units, example configs and HTCondor snippets inside) and, beside it, the
# constraints file an installation should use.
dist: venv
	rm -rf dist && $(PY) -m build --outdir dist . && cp constraints.txt dist/

venv: $(STAMP)

# install-selforg puts this project into the root (llic's master runs there); its pip download
# runs on this machine, with the venv's pip. provision-agent-root builds the Debian 11 root whose
# python3.9 (the oldest the llic agent supports) runs the agent's tests.
sandbox: venv
	$(SANDBOX) provision
	$(SANDBOX) install-selforg
	$(SANDBOX) provision-agent-root
	@command -v systemd-analyze >/dev/null || { echo "installing systemd (systemd-analyze checks the unit files)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd; }

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: venv sandbox lint
	$(VENV)/bin/pytest tests

test-unit: venv
	$(VENV)/bin/pytest tests -m 'not htcondor'

test-htcondor: venv sandbox
	$(VENV)/bin/pytest tests -m htcondor

demo: venv sandbox
	$(PY) deploy/demo.py

clean:
	$(SANDBOX) down --all
	rm -rf $(VENV)
