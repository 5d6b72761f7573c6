"""`master_submitter --dry-run` against the real `condor_submit -dry-run` (HTCondor 23.9 in a sandbox).

Every submit file of tests/llic/corpus is copied into a directory the sandbox shares (/tmp is
bind-mounted into its root, so the path is the same inside and out) and run there through
`condor_submit -dry-run -` on the pool's host, with a known environment (`env -i`), and through
`llic.submit` (and the `master_submitter --dry-run` command line) with the same working
directory and environment. The two must agree job by job and field by field, and on the job
policy attributes (compared after classad2 unparses both), the log and submission on hold.
The files of tests/llic/corpus/refused must be refused by both; those of corpus/nonvanilla are
accepted by condor_submit and refused by llic (another universe, or a command llic cannot
honour); both name, in their first line, the line llic's error must name.

How condor_submit -dry-run prints jobs (23.9): each cluster starts with the full ad of its first
job (`ClusterId=...` ... `ProcId=0`), then every further job prints only the attributes that
differ from that cluster ad, each ad ending with a `.` line. String values are old-ClassAd
literals: inside the double quotes only `"` is escaped (as `\\"`), backslashes are literal (the
corpus avoids a literal backslash before a double quote, which this cannot tell apart).

Mapping from job ad to TaskSpec (a job's ad = its cluster's first ad updated with its own lines):
- executable <- Cmd (condor_submit already makes it absolute).
- arguments <- Arguments (new syntax, split with `''` escapes) or Args (old syntax, split at
  blanks); the job's own line wins over the cluster ad's, and within one level Arguments wins
  (as the starter reads it). Absent: no arguments.
- environment <- Environment (new syntax) or Env (old syntax, split at EnvDelim), same precedence.
- input/output/error <- In/Out/Err, with "/dev/null" (condor's "no file") as None.
- initialdir <- Iwd (absolute, as written: condor keeps `./` and a trailing `/`).
- transfer_input_files <- TransferInput split at commas (absent: none);
  transfer_output_files <- TransferOutput (absent: None; "" is no files).
- process <- ProcId, cluster <- ClusterId.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import classad2
import pytest

from deploy.harness.sandbox import Sandbox, SandboxPool
from llic.submit import (
    SubmitFileError,
    TaskSpec,
    parse_submit_file,
    parse_submit_text,
    parse_v1_environment,
    parse_v2_environment,
    split_args,
)

pytestmark = pytest.mark.htcondor

CORPUS = Path(__file__).parent / "corpus"
SUBMIT_FILES = sorted(p.name for p in CORPUS.glob("*.sub"))
REFUSED = sorted(f"refused/{p.name}" for p in (CORPUS / "refused").glob("*.sub"))
NON_VANILLA = sorted(f"nonvanilla/{p.name}" for p in (CORPUS / "nonvanilla").glob("*.sub"))
POLICY = (
    "OnExitRemove",
    "OnExitHold",
    "OnExitHoldReason",
    "OnExitHoldSubCode",
    "PeriodicHold",
    "PeriodicHoldReason",
    "PeriodicHoldSubCode",
    "PeriodicRelease",
    "PeriodicRemove",
    "JobMaxRetries",
    "JobSuccessExitCode",
)
SANDBOX_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def test_the_corpus_is_big_enough() -> None:
    assert len(SUBMIT_FILES) >= 34 and len(REFUSED) >= 20 and len(NON_VANILLA) >= 15


@pytest.fixture(scope="module")
def pool(sandbox: Sandbox) -> SandboxPool:
    return sandbox.up("llsub", slots=1, hosts=1)


@pytest.fixture(scope="module")
def workdir(sandbox: Sandbox) -> Path:
    """The corpus in a directory the sandbox user can read, at the same path inside the root."""
    target = sandbox.shared_dir() / "corpus"
    shutil.copytree(CORPUS, target)
    return target


def condor_environ(pool: SandboxPool) -> dict[str, str]:
    """condor_submit's whole environment in the sandbox (see run_condor_submit)."""
    return {
        "CONDOR_CONFIG": pool.hosts[0]["config_file"],
        "PATH": SANDBOX_PATH,
        "HOME": "/tmp",
        "LLIC_CORPUS": "yes",
        "LC_CTYPE": "C.UTF-8",  # else Python sets it in the CLI's own environment (PEP 538)
    }


def condor_submit(pool: SandboxPool, workdir: Path, name: str) -> subprocess.CompletedProcess[str]:
    env = " ".join(f"{k}={v}" for k, v in condor_environ(pool).items())
    script = f'cd "$1" && exec env -i {env} condor_submit -dry-run - "$2"'
    return pool.exec("sh", "-c", script, "sh", str(workdir), name, check=False)


def run_condor_submit(pool: SandboxPool, workdir: Path, name: str) -> str:
    res = condor_submit(pool, workdir, name)
    assert res.returncode == 0, f"condor_submit -dry-run {name} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout


def classad_string(value: str) -> str:
    assert value.startswith('"') and value.endswith('"'), value
    return value[1:-1].replace('\\"', '"')


def job_ads(text: str) -> list[tuple[dict[str, str], dict[str, str]]]:
    """(its cluster's first ad, its own lines) of each job of `condor_submit -dry-run -` output."""
    jobs: list[tuple[dict[str, str], dict[str, str]]] = []
    cluster_ad: dict[str, str] = {}
    own: dict[str, str] = {}
    for line in text.splitlines():
        if line == ".":
            if "ClusterId" in own:
                cluster_ad, own = own, {}
            jobs.append((cluster_ad, own))
            own = {}
            continue
        name, eq, value = line.partition("=")
        if eq and name.isidentifier():
            own[name] = value
    return jobs


def parse_dry_run(text: str) -> list[dict[str, Any]]:
    """Jobs of `condor_submit -dry-run -` output as TaskSpec-like dicts (mapping in the docstring)."""
    return [job_from_ads(cluster_ad, own) for cluster_ad, own in job_ads(text)]


def job_from_ads(cluster_ad: dict[str, str], own: dict[str, str]) -> dict[str, Any]:
    ad = {**cluster_ad, **own}

    def first(*names: str) -> tuple[str, str] | None:
        for level in (own, cluster_ad):
            for n in names:
                if n in level:
                    return n, classad_string(level[n])
        return None

    args = first("Arguments", "Args")
    if args is None:
        arguments: list[str] = []
    elif args[0] == "Arguments":
        arguments = split_args(args[1])
    else:
        arguments = [a for a in args[1].split() if a]
    env = first("Environment", "Env")
    if env is None:
        environment: dict[str, str] = {}
    elif env[0] == "Environment":
        environment = parse_v2_environment(env[1])
    else:
        environment = parse_v1_environment(env[1], classad_string(ad.get("EnvDelim", '";"')))

    def stream(attr: str) -> str | None:
        value = classad_string(ad[attr])
        return None if value == "/dev/null" else value

    inputs = classad_string(ad["TransferInput"]).split(",") if "TransferInput" in ad else []
    outputs = (
        [f for f in classad_string(ad["TransferOutput"]).split(",") if f] if "TransferOutput" in ad else None
    )
    return {
        "executable": classad_string(ad["Cmd"]),
        "arguments": arguments,
        "environment": environment,
        "input": stream("In"),
        "output": stream("Out"),
        "error": stream("Err"),
        "initialdir": classad_string(ad["Iwd"]),
        "transfer_input_files": [f for f in inputs if f],
        "transfer_output_files": outputs,
        "process": int(ad["ProcId"]),
        "cluster": int(ad["ClusterId"]),
    }


def llic_jobs(workdir: Path, name: str, environ: dict[str, str]) -> list[TaskSpec]:
    submit = parse_submit_file(name, cwd=workdir, environ=environ)
    return submit.tasks(1)


@pytest.mark.parametrize("name", SUBMIT_FILES)
def test_dry_run_matches_condor_submit(pool: SandboxPool, workdir: Path, name: str) -> None:
    expected = parse_dry_run(run_condor_submit(pool, workdir, name))
    got = [t.to_dict() for t in llic_jobs(workdir, name, condor_environ(pool))]
    assert expected, f"condor_submit made no jobs from {name}"
    assert len(got) == len(expected), [(j["cluster"], j["process"]) for j in expected]
    for want, have in zip(expected, got, strict=True):
        for key, value in want.items():
            assert have[key] == value, f"{name} {want['cluster']}.{want['process']} {key}"


@pytest.mark.parametrize("name", SUBMIT_FILES)
def test_each_block_alone_gives_the_same_tasks(pool: SandboxPool, workdir: Path, name: str) -> None:
    """What a master is given (QueueBlock.submit_text) yields that block's tasks again."""
    submit = parse_submit_file(name, cwd=workdir, environ=condor_environ(pool))
    for block in submit.blocks:
        cluster = 1 + block.cluster_offset
        again = parse_submit_text(block.submit_text(), name=f"{name}#{block.index}", cwd="/nonexistent")
        assert len(again.blocks) == 1
        assert again.blocks[0].tasks(cluster) == block.tasks(cluster)
        assert again.blocks[0].mode == block.mode
        assert outcome(again.blocks[0].agent_attributes) == outcome(block.agent_attributes)


def outcome(fn: Callable[[], object]) -> object:
    """fn's result, or the reason of the SubmitFileError it raises (the lines differ: other text)."""
    try:
        return fn()
    except SubmitFileError as e:
        return ("error", e.reason)


def test_master_submitter_dry_run_prints_the_same(pool: SandboxPool, workdir: Path) -> None:
    """The command line, run in the corpus directory with condor_submit's environment."""
    environ = condor_environ(pool)
    for name in ("05_queue_from_file.sub", "13_getenv_env.sub", "16_multi_queue.sub"):
        res = subprocess.run(
            [str(Path(sys.executable).with_name("master_submitter")), "--dry-run", name],
            cwd=workdir,
            env=environ,  # exactly condor_submit's: getenv copies it into the environment
            capture_output=True,
            text=True,
        )
        assert res.returncode == 0, res.stderr
        printed = [json.loads(line) for line in res.stdout.splitlines()]
        expected = parse_dry_run(run_condor_submit(pool, workdir, name))
        keys = ["executable", "arguments", "environment", "input", "output", "error", "initialdir"]
        keys += ["transfer_input_files", "process"]
        for want, have in zip(expected, printed, strict=True):
            assert {k: have[k] for k in keys} == {k: want[k] for k in keys}


def unparsed(expression: str) -> str:
    """A ClassAd expression as classad2 writes it (condor_submit writes them unparsed)."""
    return str(classad2.ExprTree(expression))


@pytest.mark.parametrize("name", SUBMIT_FILES)
def test_policy_log_and_hold_match_condor_submit(pool: SandboxPool, workdir: Path, name: str) -> None:
    """What the master honours per job (llic/task.py's log, hold, policy) is what the job ad says."""
    ads = [{**cluster_ad, **own} for cluster_ad, own in job_ads(run_condor_submit(pool, workdir, name))]
    tasks = llic_jobs(workdir, name, condor_environ(pool))
    assert len(ads) == len(tasks)
    for ad, task in zip(ads, tasks, strict=True):
        want = {k: unparsed(ad[k]) for k in POLICY if k in ad}
        have = {k: unparsed(v) for k, v in task.policy.items() if k in POLICY}
        assert have == want, f"{name} {task.process}"
        assert task.policy.get("SubmitEventNotes") == (
            classad_string(ad["SubmitEventNotes"]) if "SubmitEventNotes" in ad else None
        )
        log = None if task.log is None else os.path.join(task.initialdir, task.log)
        assert log == (classad_string(ad["UserLog"]) if "UserLog" in ad else None), f"{name} {task.process}"
        assert task.hold == (ad.get("JobStatus") == "5"), f"{name} {task.process}"


def refusal_line(path: Path) -> int:
    """The line llic must name, from the file's first line (`# llic refuses: line N`)."""
    head = path.read_text().splitlines()[0]
    assert head.startswith("# llic refuses: line "), head
    return int(head.rsplit(" ", 1)[1])


@pytest.mark.parametrize("name", REFUSED)
def test_files_condor_submit_refuses_llic_refuses(pool: SandboxPool, workdir: Path, name: str) -> None:
    res = condor_submit(pool, workdir, name)
    assert res.returncode != 0, f"condor_submit -dry-run {name} accepted it:\n{res.stdout}"
    with pytest.raises(SubmitFileError) as info:
        llic_jobs(workdir, name, condor_environ(pool))
    assert info.value.line == refusal_line(workdir / name), str(info.value)


@pytest.mark.parametrize("name", NON_VANILLA)
def test_non_vanilla_files_are_refused_naming_the_line(pool: SandboxPool, workdir: Path, name: str) -> None:
    """condor_submit accepts them (another universe, a container, a command llic cannot honour);
    llic refuses them, naming the file and line."""
    run_condor_submit(pool, workdir, name)
    with pytest.raises(SubmitFileError) as info:
        llic_jobs(workdir, name, condor_environ(pool))
    assert info.value.line == refusal_line(workdir / name), str(info.value)
    assert str(info.value).startswith(f"{name}:{info.value.line}: ")
