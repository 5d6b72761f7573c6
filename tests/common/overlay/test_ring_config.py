"""The [ring] configuration: identity, addresses and key file, with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import ConfigError, parse_config
from common.overlay.ids import node_id_from_name
from common.overlay.ring import RingConfig


def test_identity_from_name_or_explicit_id() -> None:
    cfg = parse_config(
        'node_name = "cm.poolA"\nkey_file = "/etc/poold/ring.key"\n', RingConfig, source="p.toml"
    )
    assert cfg.identity() == node_id_from_name("cm.poolA") and cfg.port == 7640 and cfg.bootstrap is None
    text = (
        'node_name = "x"\nnode_id = "'
        + "0" * 31
        + '1"\nkey_file = "k"\n[overlay]\nkeepalive_interval = 1.5\n'
    )
    cfg = parse_config(text, RingConfig, source="p.toml")
    assert cfg.identity() == 1 and cfg.overlay.keepalive_interval == 1.5


def test_bootstrap_names_one_seed_or_several() -> None:
    base = 'node_name = "a"\nkey_file = "k"\n'
    one = parse_config(base + 'bootstrap = "cm1:7640"\n', RingConfig, source="p.toml")
    several = parse_config(base + 'bootstrap = ["cm1:7640", "cm2:7640"]\n', RingConfig, source="p.toml")
    none = parse_config(base, RingConfig, source="p.toml")
    assert (one.seeds(), several.seeds(), none.seeds()) == (["cm1:7640"], ["cm1:7640", "cm2:7640"], [])


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ('bootstrap = "poolB"', "key 'bootstrap': Value error, 'poolB' is not host:port"),
        ('bootstrap = ["cm1:7640", "cm2"]', "key 'bootstrap': Value error, seed 2: 'cm2' is not host:port"),
        ('bootstrap = ["cm1:7640", 7640]', "key 'bootstrap.1': Input should be a valid string"),
        ("bootstrap = []", "key 'bootstrap': Value error, give 1 to 32 seeds, not 0"),
        ('bootstrap = ["cm1:7640", "a b:7641"]', "seed 2: 'a b:7641' is not host:port (an IPv4"),
        ('bootstrap = "[::1]:7641"', "'[::1]:7641' is not host:port (an IPv4 address or a DNS name"),
        ('advertise = "cm 1:7640"', "key 'advertise': Value error, 'cm 1:7640' is not host:port"),
        ('advertise = "cm:\uff17\uff16\uff14\uff11"', "is not host:port"),  # digits int() takes
        (f'advertise = "{"c" * 300}:7640"', "is not host:port"),  # longer than a message carries
        ('bootstrap = "cm.example.org.:7640"', "write the host without its trailing dot"),
        (f"bootstrap = {[f'cm{i}:7640' for i in range(33)]}", "give 1 to 32 seeds, not 33"),
        ('node_id = "xyz"', "key 'node_id'"),
        ("port = 70000", "key 'port'"),
        ("[overlay]\nleaf_set_size = 0", "key 'overlay.leaf_set_size'"),
        ("[overlay]\nkeepalive = 3", "unknown key 'overlay.keepalive'"),
        ("[overlay]\nleaf_set_size = 15", "must be even"),
        ("[overlay]\nb = 3", "b must be 1, 2, 4 or 8"),
    ],
)
def test_bad_values_name_the_key(extra: str, fragment: str, tmp_path: Path) -> None:
    text = f'node_name = "a"\nkey_file = "k"\n{extra}\n'
    with pytest.raises(ConfigError) as info:
        parse_config(text, RingConfig, source="poold.toml")
    assert str(info.value).startswith("poold.toml: ") and fragment in str(info.value)
    assert "\n" not in str(info.value)
