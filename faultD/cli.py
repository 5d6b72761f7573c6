"""Command line of faultd: run the daemon, show its state, check a config file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.cli import DaemonCli, run_main
from common.condor_defaults import read_condor_config
from common.config import ConfigError
from faultD.config import CONDOR_KEYS, FaultdConfig, needs_condor_values, with_condor_values


def _resolve(config: FaultdConfig, path: Path) -> FaultdConfig:
    """What the file leaves out, from HTCondor's configuration (faultD.config)."""
    if not needs_condor_values(config):
        return config
    values = read_condor_config(config.condor.condor_config, CONDOR_KEYS)
    return with_condor_values(config, values, str(path))


def _check(config: FaultdConfig, path: Path) -> None:
    config.ring.check_key(path, same_pool=True)
    if config.condor.config_dir is None or not config.condor.config_dir.is_dir():
        raise ConfigError(f"{path}: condor.config_dir: {config.condor.config_dir} is not a directory")


def _serve(config: FaultdConfig, reread: Callable[[], FaultdConfig]) -> int:
    import trio

    from common.logging import configure_logging
    from faultD.service import FaultDaemon

    configure_logging("faultd", config.ring.node_name, level=config.daemon.log_level)
    trio.run(FaultDaemon(config, reread=reread).serve)
    return 0


def _describe(config: FaultdConfig) -> str:
    f = config.fault
    return (
        f"node {config.ring.node_name} on port {config.ring.port}, "
        f"{'original manager' if f.original_manager else 'listener'}, collector {f.collector}, "
        f"bootstrap {', '.join(config.ring.seeds()) or 'none: founds the ring'}, role file "
        f"{config.condor.config_dir / config.condor.role_file}, LOG {config.condor.log_dir}, "
        f"SPOOL {config.condor.spool_dir}"
    )


def _ago(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds} s ago"


def render_status(s: dict[str, Any]) -> str:
    """`faultd status` for a terminal, from the status the daemon's control socket returns."""
    if s.get("role") == "joining":
        return f"faultd on {s.get('overlay')}: joining the pool's ring"
    lines = [
        f"role            {s['role']}{' (original manager)' if s.get('original_manager') else ''}",
        f"node            {s['node_id']} at {s.get('overlay')}",
        f"manager         {s.get('manager') or 'unknown'} at {s.get('manager_address') or '-'}",
        f"collector       {s.get('manager_collector') or '-'}",
        f"epoch / seq     {s['epoch']} / {s['seq']}",
        f"last alive      {_ago(s.get('last_alive_s_ago'))}",
    ]
    replica = s.get("replica")
    if replica:
        lines.append(
            f"replica held    version {replica['version']} (epoch {replica['epoch']}) of "
            f"{replica['manager'][:8]}, {replica['age_s']} s old: {', '.join(replica['files']) or 'no files'}"
        )
    else:
        lines.append("replica held    none")
    if s.get("replica_holders"):
        lines.append(f"replicas at     {', '.join(s['replica_holders'])}")
    c = s.get("condor", {})
    lines.append(f"HTCondor        role file {c.get('role_file')}, {c.get('reconfigs')} reconfig(s)")
    if c.get("error"):
        lines.append(f"HTCondor error  {c['error']}")
    lines.append(f"leaf set        {len(s.get('leaf_set', []))} machine(s)")
    if s.get("seeds_unheard"):  # asked again every revive_interval until they answer
        lines.append(f"seeds unheard   {', '.join(s['seeds_unheard'])}")
    drops = {k: v for k, v in s.get("drops", {}).items() if v}
    if drops:
        lines.append(f"dropped         {drops}")
    if s.get("refused"):
        lines.append(f"refused         {s['refused']} (not from the manager, or not the original)")
    for h in s.get("history", []):
        lines.append(f"  {h}")
    return "\n".join(lines)


CLI = DaemonCli(
    prog="faultd",
    description="central-manager failover for an HTCondor pool",
    default_config=Path("/etc/faultd/faultd.toml"),
    model=FaultdConfig,
    check=_check,
    serve=_serve,
    describe=_describe,
    render_status=render_status,
    status_help="role, manager, epoch, last alive, replicas held",
    check_help="validate a config file (paths it leaves out are read from HTCondor's configuration)",
    resolve=_resolve,
)


def main(argv: list[str] | None = None) -> int:
    """faultd's entry point: parse `argv` and run the command; user errors exit 2 with one line."""
    args = CLI.parser()[0].parse_args(argv)
    return run_main("faultd", lambda: CLI.command(args))
