"""Key material for a test or sandbox ring: the shared ring key, the ring's CA, and a key pair
and certificate per node, made with the same functions as `poold keys` / `faultd keys`."""

from __future__ import annotations

from pathlib import Path

from common.keys import NodeFiles, init_ca, issue_node
from common.overlay.auth import generate_key_file
from common.overlay.certs import CertificateAuthority, load_certificate, load_private_key


class RingKeys:
    """One ring's keys under `workdir`: ring.key, ca/ (ca.key, ca.pub), and nodes/NAME/."""

    def __init__(self, workdir: Path, *, ring: str = "poold") -> None:
        self.workdir = workdir
        self.ring = ring
        workdir.mkdir(parents=True, exist_ok=True)
        self.key_file = workdir / "ring.key"
        if not self.key_file.exists():
            generate_key_file(self.key_file)
        ca_dir = workdir / "ca"
        self.ca = (
            CertificateAuthority(load_private_key(ca_dir / "ca.key", "CA private key"))
            if (ca_dir / "ca.key").exists()
            else init_ca(ca_dir)
        )
        self.ca_file = ca_dir / "ca.pub"
        self.nodes: dict[str, NodeFiles] = {}

    def node(
        self, name: str, *, hosts: list[str], pool: str, node_id: int | None = None, **kw: object
    ) -> NodeFiles:
        """A node's key and certificate (made once; a second call returns the same files)."""
        if name not in self.nodes:
            directory = self.workdir / "nodes" / name
            if (directory / "node.cert").exists():
                cert = load_certificate(directory / "node.cert")
                self.nodes[name] = NodeFiles(directory / "node.key", directory / "node.cert", cert)
            else:
                self.nodes[name] = issue_node(
                    self.ca,
                    directory,
                    ring=self.ring,
                    name=name,
                    pool=pool,
                    hosts=hosts,
                    node_id=node_id,
                    **kw,
                )  # type: ignore[arg-type]
        return self.nodes[name]

    def toml(self, name: str) -> str:
        """The `[ring]` lines naming a node's key material (after `node` made it)."""
        files = self.nodes[name]
        return (
            f'key_file = "{self.key_file}"\n'
            f'node_key_file = "{files.key}"\n'
            f'node_cert_file = "{files.cert}"\n'
            f'ca_file = "{self.ca_file}"\n'
        )

    def ring_fields(self, name: str) -> dict[str, Path]:
        """The same as keyword arguments of RingConfig."""
        files = self.nodes[name]
        return {
            "key_file": self.key_file,
            "node_key_file": files.key,
            "node_cert_file": files.cert,
            "ca_file": self.ca_file,
        }
