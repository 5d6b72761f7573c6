"""faultd's configuration file (TOML); config/faultd.toml documents every key."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from common.cli import DaemonSection
from common.condor.config_files import check_config_file_name
from common.condor.knobs import check_daemon_name, check_host_port
from common.config import StrictModel
from common.hostport import parse_address
from common.overlay.ring import RingConfig

MANAGER_CONFIG_PREFIX = "98-faultd-manager-"  # a replicated manager config file's installed name


class FaultSection(StrictModel):
    """The `[fault]` section of faultd's config: this machine's part in failover, and its timing."""

    original_manager: bool = Field(False, description="true only in the central manager's config")
    manager_name: str | None = Field(
        None, description="the original manager's ring node_name: lets machines elect one if it never starts"
    )
    collector: str = Field(description="host:port a collector on this machine listens on")
    alive_interval: float = Field(1.0, gt=0, le=60)
    missed_alives: int = Field(3, ge=1, le=100)
    replicas: int = Field(3, ge=1, le=16, description="K: ring neighbours holding the manager's state")
    replication_interval: float = Field(10.0, gt=0)
    state_interval: float = Field(2.0, gt=0, description="how often the manager re-reads its state")

    @field_validator("collector")
    @classmethod
    def _host_port(cls, value: str) -> str:
        parse_address(value)
        check_host_port(value)  # it becomes COLLECTOR_HOST
        return value


class CondorSection(StrictModel):
    """The `[condor]` section of faultd's config: HTCondor's files, role daemons, what is replicated."""

    condor_config: Path | None = Field(None, description="CONDOR_CONFIG for the gateway's HTCondor client")
    token_dir: Path | None = Field(
        None, description="faultd's IDTOKENS (identity faultd@<trust domain>); the gateway uses only these"
    )
    config_dir: Path = Field(Path("/etc/condor/config.d"), description="where faultd writes its role file")
    role_file: str = Field("99-faultd-role.conf", pattern=r"^[A-Za-z0-9._-]+\.conf$")
    log_dir: Path = Field(Path("/var/log/condor"), description="HTCondor's LOG (holds .master_address)")
    spool_dir: Path = Field(Path("/var/lib/condor/spool"), description="HTCondor's SPOOL (Accountant log)")
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
        for path in value:
            check_config_file_name(MANAGER_CONFIG_PREFIX + path.name)  # installed under this name
        return value


class FaultdDaemonSection(DaemonSection):
    """The `[daemon]` section of faultd's config: common.cli.DaemonSection with faultd's defaults."""

    control_socket: Path = Path("/run/faultd/faultd.sock")
    gateway_timeout: float = Field(10.0, gt=0)


class FaultdConfig(StrictModel):
    """A whole faultd config file (TOML); config/faultd.toml documents every key."""

    fault: FaultSection
    ring: RingConfig
    condor: CondorSection = CondorSection()
    daemon: FaultdDaemonSection = FaultdDaemonSection()
