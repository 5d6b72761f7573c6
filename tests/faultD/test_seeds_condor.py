"""faultD against real HTCondor: a machine added while the central manager is down gets in
through another of the seeds every machine names (`[ring] bootstrap`, a list)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.harness.fault_pool import FaultPool
from deploy.harness.fault_pool import fault_pool as harness_pool
from deploy.harness.sandbox import Sandbox

pytestmark = pytest.mark.htcondor


@pytest.fixture
def fault_pool(sandbox: Sandbox, tmp_path: Path) -> Iterator[FaultPool]:
    with harness_pool(sandbox, tmp_path, "fds", hosts=4, slots=1) as fp:
        yield fp


def test_a_machine_added_while_the_manager_is_down_joins_through_another_seed(fault_pool: FaultPool) -> None:
    """Hosts 0-2 are the seeds (the harness names the same three in every file, as docs/admin.md
    advises). The central manager (host 0) is killed; once a replacement runs the pool, host 3's
    faultd starts for the first time: no ring member knows it, so nobody but a seed can let it
    in. It joins through host 1 or 2 and points its HTCondor at the replacement's collector.
    (Named with the manager as its one bootstrap, it waited for the manager: checked by hand
    with the harness's seeds cut to host 0, 90 s without joining.)"""
    fp = fault_pool
    fp.start_all(hosts=3)
    fp.kill_host(0)
    replacement = fp.wait("a replacement manager", lambda: [j for j in fp.managers() if j != 0], poll=0.2)[0]
    fp.wait("hosts 1 and 2 follow the replacement", lambda: fp.follow_count(replacement) == 2)
    fp.start(3)
    fp.wait("host 3, new, follows the replacement", lambda: fp.follow_count(replacement) == 3)
    status = fp.status(3)
    assert status["role"] != "joining" and status["leaf_set"]
    assert fp.status(3)["condor"]["collector"] == fp.collector(replacement)
