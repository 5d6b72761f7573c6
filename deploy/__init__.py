"""Deployment files (systemd units, HTCondor snippets, the sandbox) and, in `deploy.harness`, the
Python side of the sandbox for tests, benchmarks and the demo. Not part of the installed
packages: it works from a checkout only."""
