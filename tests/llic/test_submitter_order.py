"""master_submitter submits a master's first agents before the master job unless the queue
block's description uses the cluster, which only the master job's submission gives
(llic/submitter.py's module doc, step 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llic.submit import parse_submit_file
from llic.submitter import uses_cluster


def _block_text(tmp_path: Path, body: str) -> str:
    (tmp_path / "job.sub").write_text(body)
    (block,) = parse_submit_file(str(tmp_path / "job.sub"), cwd=tmp_path).blocks
    return block.submit_text()


def test_a_description_without_the_cluster_lets_the_agents_go_first(tmp_path: Path) -> None:
    # the block's own header line names cluster_offset and starts_cluster: not a use
    text = _block_text(tmp_path, "executable = /bin/true\noutput = out.$(Process)\nqueue 3\n")
    assert "cluster" in text.lower()
    assert not uses_cluster(text)


@pytest.mark.parametrize(
    "line",
    [
        "output = out.$(Cluster).$(Process)",
        "arguments = $(ClusterId)",
        "arguments = $INT(Cluster,%05d)",
        "tag = $( cluster )\narguments = $(tag)",
        "request_memory = $(CLUSTER)",
    ],
)
def test_a_description_that_uses_the_cluster_keeps_its_agents_after_the_master(
    tmp_path: Path, line: str
) -> None:
    text = _block_text(tmp_path, f"executable = /bin/true\n{line}\nqueue 3\n")
    assert uses_cluster(text)
