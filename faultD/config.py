"""faultd's configuration file (TOML); common/deploy_files/config/faultd.toml documents every key.

What HTCondor's configuration already says is read from it, not repeated here: `[condor]
config_dir`, `log_dir` and `spool_dir` default to HTCondor's LOCAL_CONFIG_DIR, LOG and SPOOL, and
`[fault] collector` to this machine's address (`[ring] bind`, else HTCondor's FULL_HOSTNAME) with
the port of HTCondor's COLLECTOR_HOST (`with_condor_values`); set in the file, they override."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from common.cli import DaemonSection
from common.condor.config_files import check_config_file_name
from common.condor.knobs import check_daemon_name, check_host_port
from common.condor_defaults import collector_address, first_dir, require
from common.config import ConfigError, StrictModel
from common.hostport import parse_address
from common.overlay.ring import RingConfig
from faultD.messages import MAX_STATE_FILES

MANAGER_CONFIG_PREFIX = "98-faultd-manager-"  # a replicated manager config file's installed name


class FaultSection(StrictModel):
    """The `[fault]` section of faultd's config: this machine's part in failover, and its timing."""

    original_manager: bool = Field(False, description="true only in the central manager's config")
    manager_name: str | None = Field(
        None,
        description="the original manager's ring node_name: lets machines elect one if it never starts;"
        " only it may preempt a replacement (without it, no preempt is believed)",
    )
    collector: str | None = Field(
        None,
        description="host:port a collector on this machine listens on (default: [ring] bind, else "
        "HTCondor's FULL_HOSTNAME, with the port of COLLECTOR_HOST)",
    )
    alive_interval: float = Field(1.0, gt=0, le=60)
    missed_alives: int = Field(3, ge=1, le=100)
    replicas: int = Field(3, ge=1, le=16, description="K: ring neighbours holding the manager's state")
    replication_interval: float = Field(10.0, gt=0)
    state_interval: float = Field(2.0, gt=0, description="how often the manager re-reads its state")

    @field_validator("collector")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is not None:
            parse_address(value)
            check_host_port(value)  # it becomes COLLECTOR_HOST
        return value


class CondorSection(StrictModel):
    """The `[condor]` section of faultd's config: HTCondor's files, role daemons, what is replicated."""

    condor_config: Path | None = Field(None, description="CONDOR_CONFIG for the gateway's HTCondor client")
    token_dir: Path | None = Field(
        None, description="faultd's IDTOKENS (identity faultd@<trust domain>); the gateway uses only these"
    )
    config_dir: Path | None = Field(
        None, description="where faultd writes its role file (default: HTCondor's LOCAL_CONFIG_DIR)"
    )
    role_file: str = Field("99-faultd-role.conf", pattern=r"^[A-Za-z0-9._-]+\.conf$")
    log_dir: Path | None = Field(None, description="HTCondor's LOG (holds .master_address); default: LOG")
    spool_dir: Path | None = Field(None, description="HTCondor's SPOOL (Accountant log); default: SPOOL")
    listener_daemons: list[str] = ["MASTER", "SCHEDD", "STARTD"]
    manager_daemons: list[str] = ["COLLECTOR", "NEGOTIATOR"]
    manager_config_files: list[Path] = Field(
        [], description="central-manager-only config files: replicated, installed on a replacement"
    )
    poold_state: Path | None = Field(None, description="poold's state file, replicated if poold runs here")

    @field_validator("listener_daemons", "manager_daemons")
    @classmethod
    def _daemon_names(cls, value: list[str]) -> list[str]:
        for name in value:
            check_daemon_name(name)  # they go into DAEMON_LIST
        return value

    @field_validator("manager_config_files")
    @classmethod
    def _config_file_names(cls, value: list[Path]) -> list[Path]:
        # The replica holds these, the Accountant log and poold's state: MAX_STATE_FILES in all.
        if len(value) > MAX_STATE_FILES - 2:
            raise ValueError(f"at most {MAX_STATE_FILES - 2} files are replicated, not {len(value)}")
        seen: dict[str, Path] = {}
        for path in value:
            check_config_file_name(MANAGER_CONFIG_PREFIX + path.name)  # installed under this name
            if path.name in seen:  # one would be installed over the other on a replacement
                raise ValueError(f"{path} and {seen[path.name]} share the base name {path.name!r}")
            seen[path.name] = path
        return value


class FaultdDaemonSection(DaemonSection):
    """The `[daemon]` section of faultd's config: common.cli.DaemonSection with faultd's defaults."""

    control_socket: Path = Path("/run/faultd/faultd.sock")
    gateway_timeout: float = Field(10.0, gt=0)


class FaultdConfig(StrictModel):
    """A whole faultd config file (TOML); common/deploy_files/config/faultd.toml documents every key."""

    fault: FaultSection
    ring: RingConfig
    condor: CondorSection = CondorSection()
    daemon: FaultdDaemonSection = FaultdDaemonSection()


# What faultd reads from HTCondor's configuration when its file leaves it out.
CONDOR_KEYS = ("LOCAL_CONFIG_DIR", "LOG", "SPOOL", "COLLECTOR_HOST", "FULL_HOSTNAME")
WILDCARDS = ("", "0.0.0.0", "::")


def needs_condor_values(config: FaultdConfig) -> bool:
    """Whether the file leaves something to HTCondor's configuration."""
    c = config.condor
    return None in (c.config_dir, c.log_dir, c.spool_dir, config.fault.collector)


def with_condor_values(config: FaultdConfig, values: dict[str, str | None], source: str) -> FaultdConfig:
    """The config with what it left out taken from HTCondor's `values` (CONDOR_KEYS); a
    ConfigError names the key when neither gives one. Pure: the caller reads the values."""
    c = config.condor
    condor = {
        "config_dir": c.config_dir or first_dir(values.get("LOCAL_CONFIG_DIR")),
        "log_dir": c.log_dir or (Path(values["LOG"]) if values.get("LOG") else None),
        "spool_dir": c.spool_dir or (Path(values["SPOOL"]) if values.get("SPOOL") else None),
    }
    require(condor["config_dir"], source, "condor.config_dir", "LOCAL_CONFIG_DIR")
    require(condor["log_dir"], source, "condor.log_dir", "LOG")
    require(condor["spool_dir"], source, "condor.spool_dir", "SPOOL")
    collector = config.fault.collector
    if collector is None:
        bind = config.ring.bind
        host = bind if bind not in WILDCARDS else values.get("FULL_HOSTNAME")
        require(host, source, "fault.collector", "FULL_HOSTNAME")
        port = (collector_address(values.get("COLLECTOR_HOST")) or ":9618").rpartition(":")[2]
        collector = f"{host}:{port}"
        try:
            check_host_port(collector)  # it becomes COLLECTOR_HOST, as a configured one would
        except ValueError as e:
            why = f"fault.collector from HTCondor's FULL_HOSTNAME and COLLECTOR_HOST: {e}"
            raise ConfigError(f"{source}: {why}") from None
    return config.model_copy(
        update={
            "condor": c.model_copy(update=condor),
            "fault": config.fault.model_copy(update={"collector": collector}),
        }
    )
