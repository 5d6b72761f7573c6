"""When each worker's copy of the 500 MB `db` travelled (HTCondor's transfer_history of every
execute host, from `bench/llic --keep-logs DIR`): `db_transfers.py DIR`, one line per transfer,
run by run (UTC, whole seconds; llic's agents are one cluster, each dask worker a cluster)."""

import sys
import time
from collections.abc import Iterator
from pathlib import Path


def ads(path: Path) -> Iterator[dict[str, str]]:
    """The ClassAds of a transfer_history file (`***` between them)."""
    ad: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("***"):
            if ad:
                yield ad
            ad = {}
        elif " = " in line:
            key, value = line.split(" = ", 1)
            ad[key] = value.strip().strip('"')
    if ad:
        yield ad


def hms(epoch: str) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(int(epoch)))


for run in sorted(Path(sys.argv[1]).glob("common-*")):
    print(run.name)
    rows = []
    for history in sorted(run.glob("host*/transfer_history")):
        for ad in ads(history):
            if ad.get("TransferFileName") == "db" and ad.get("TransferType") == "download":
                job = f"{ad['JobClusterId']}.{ad['JobProcId']}"
                host = history.parent.name
                ok = ad["TransferSuccess"]
                rows.append((ad["TransferStartTime"], ad["TransferEndTime"], job, host, ok))
    for start, end, job, host, ok in sorted(rows):
        print(f"  db {hms(start)} -> {hms(end)}  job {job} {host} ok={ok}")
