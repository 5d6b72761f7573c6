"""The attacker of the hostile-peer suite, in two kinds: one that holds nothing (it can only send
bytes), and one that holds the ring key and a valid node certificate of its own (a compromised
machine or central manager). It speaks the daemons' protocols exactly as far as its keys let it."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from common.hostport import parse_address
from common.overlay.claims import endorse
from common.overlay.envelope import SignedSealer
from common.overlay.identity import IdentityFiles, NodeIdentity, load_identity
from common.overlay.messages import AppMessage, Peer, overlay_codec
from common.wire import HEADER, Message, MessageCodec, pack
from deploy.harness.ring_keys import RingKeys


class Nemesis:
    """Sends datagrams and TCP streams at a daemon; with keys, sealed and signed ones."""

    def __init__(self, keys: RingKeys | None = None, *, name: str = "mallory", pool: str = "evil",
                 node_id: int | None = None, hosts: list[str] | None = None,
                 bind: str = "127.0.0.1") -> None:  # fmt: skip
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((bind, 0))
        self.addr = f"{bind}:{self.udp.getsockname()[1]}"
        self.identity: NodeIdentity | None = None
        self.sealer: SignedSealer | None = None
        self.codec = overlay_codec()
        if keys is not None:
            files = keys.node(name, hosts=hosts or [bind], pool=pool, node_id=node_id)
            self.identity = load_identity(IdentityFiles(files.key, files.cert, keys.ca_file, None))
            ring_key = bytes.fromhex(keys.key_file.read_text().strip())
            self.sealer = SignedSealer(ring_key, self.identity, context="datagram")
            self.bulk_sealer = SignedSealer(ring_key, self.identity, context="bulk", max_size=8192)

    @property
    def me(self) -> Peer:
        """The node the nemesis's certificate speaks for."""
        assert self.identity is not None
        return Peer(id=self.identity.cert.node_id, addr=self.addr)

    def endorse(self, payload: AppMessage) -> AppMessage:
        """The payload with the nemesis's own proof (valid for what its certificate says)."""
        assert self.identity is not None
        return endorse(self.identity, payload, time.time())

    def seal(self, body: bytes, to: str, *, recipient: str | None = None, at: float | None = None) -> bytes:
        """A datagram body sealed with the ring key and signed by the nemesis."""
        assert self.sealer is not None
        return self.sealer.seal(body, recipient or to, time.time() if at is None else at, os.urandom(16))

    def datagram(self, msg: Message, to: str, **kw: object) -> bytes:
        """An overlay message, encoded, sealed and signed for `to`."""
        return self.seal(self.codec.encode(msg), to, **kw)  # type: ignore[arg-type]

    def send(self, to: str, *datagrams: bytes) -> None:
        target = parse_address(to)
        for d in datagrams:
            try:
                self.udp.sendto(d, target)
            except OSError:
                pass  # too big for a datagram: the kernel refuses it, which is the point

    def bulk(self, to: str, msg: Message, codec: MessageCodec) -> None:
        """One message over the bulk channel's protocol, signed by the nemesis (blocking)."""
        import hashlib

        assert self.identity is not None
        body = codec.encode(msg)
        descriptor = pack([msg.TYPE, len(body), hashlib.sha256(body).digest()])
        header = self.bulk_sealer.seal(descriptor, to, time.time(), os.urandom(16))
        with socket.create_connection(parse_address(to), timeout=10) as s:
            s.sendall(HEADER.pack(len(header)) + header + body)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(10)
            try:
                s.recv(1)  # until the daemon closes: it has handled the message
            except OSError:
                pass

    def close(self) -> None:
        self.udp.close()


# This machine's end of the sandbox bridge: what a peer outside the sandbox pools speaks from.
SANDBOX_BRIDGE = "10.213.0.1"


@contextmanager
def sandbox_insider(keys: RingKeys, name: str, pool: str = "physics") -> Iterator[Nemesis]:
    """A nemesis on the sandbox bridge, certified by the ring's CA for `pool`: an insider of a
    sandbox federation (valid keys, lies in what it says)."""
    nemesis = Nemesis(keys, name=name, pool=pool, bind=SANDBOX_BRIDGE)
    try:
        yield nemesis
    finally:
        nemesis.close()
