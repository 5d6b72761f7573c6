"""deploy/sandbox's recommended security mode, as the configuration it writes (no daemons: the
running pools are checked in test_security_condor.py)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

SANDBOX = Path(__file__).resolve().parents[2] / "deploy" / "sandbox"


@pytest.fixture(scope="module")
def sandbox() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("deploy_sandbox_script", str(SANDBOX))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses look their module up there
    loader.exec_module(module)
    return module


def pool(sandbox: ModuleType, security: str) -> object:
    hosts = [
        sandbox.Host(f"h{j}.secu.sandbox", f"10.213.9.{10 + j}", f"ns{j}", f"v{j}", f"/srv/sandbox/h{j}", r)
        for j, r in enumerate(("manager", "execute"))
    ]
    return sandbox.Pool(name="secu", index=9, slots=1, hosts=hosts, security=security)


def knobs(text: str) -> dict[str, str]:
    """KNOB = value lines, the last one winning (as in HTCondor)."""
    values = {}
    for line in text.splitlines():
        if match := re.match(r"^([A-Za-z][A-Za-z0-9_.]*)\s*=\s*(.*)$", line):
            values[match[1].upper()] = match[2].strip()
    return values


def test_recommended_keeps_the_package_default_and_adds_no_weak_method_or_open_grant(
    sandbox: ModuleType,
) -> None:
    p = pool(sandbox, "recommended")
    for host in p.hosts:
        text = sandbox.host_config(p, host)
        assert text.startswith("# Generated") and f"include : {sandbox.PACKAGE_SECURITY}\n" in text
        values = knobs(text)
        assert values["TRUST_DOMAIN"] == "secu.sandbox"
        for knob, value in values.items():
            if "AUTHENTICATION_METHODS" in knob:
                assert not {"CLAIMTOBE", "ANONYMOUS"} & set(re.split(r"[,\s]+", value.upper())), knob
            if knob.startswith("ALLOW_"):
                assert "*" not in re.split(r"[,\s]+", value) and "*/*" not in value, (knob, value)
            if knob.startswith("SEC_") and knob.endswith(("_AUTHENTICATION", "_ENCRYPTION", "_INTEGRITY")):
                assert value.upper() == "REQUIRED", (knob, value)
        assert not re.search(r"^\s*use\s+security\s*:\s*host_based", text, re.I | re.M)
        assert "poold@$(TRUST_DOMAIN)" in text and "faultd@$(TRUST_DOMAIN)" in text  # the shipped snippets
        # CONFIG: poold's identity (the shipped snippet's plain assignment), then the sandbox's
        # administrator added after it; nobody else.
        assert "\nALLOW_CONFIG = $(POOLD_IDENTITY)\n" in text
        assert values["ALLOW_CONFIG"] == "$(ALLOW_CONFIG) admin@$(TRUST_DOMAIN)"
        assert values["SETTABLE_ATTRS_CONFIG"] == ", ".join(sandbox.SETTABLE_SECURE)
        assert "ALLOW_" not in values["SETTABLE_ATTRS_CONFIG"] and "SETTABLE_ATTRS_ADMINISTRATOR" not in text


def test_open_mode_is_what_it_was(sandbox: ModuleType) -> None:
    p = pool(sandbox, "open")
    text = sandbox.host_config(p, p.hosts[0])
    values = knobs(text)
    assert values["SEC_DEFAULT_AUTHENTICATION_METHODS"] == "FS, CLAIMTOBE" and values["ALLOW_WRITE"] == "*"
    assert "include :" not in text and "poold@" not in text and values["TRUST_DOMAIN"] == "sandbox"
    assert sandbox.DEFAULT_SECURITY in sandbox.SECURITY_MODES


def test_recommended_is_the_default_and_open_is_asked_for_by_name(sandbox: ModuleType) -> None:
    """Issue 15, Deliver 1: pools run HTCondor's recommended security unless a caller asks for
    open: no switch for it is left. What flocks between pools runs in the session's mode (poolD
    negotiates the cross-pool trust), and so do llic's masters (they hold their owner's token,
    llic/master_token.py)."""
    import deploy.harness.sandbox as harness
    from deploy.harness.sandbox import SECURITY_MODES

    assert sandbox.DEFAULT_SECURITY == "recommended"
    assert sandbox.SECURITY_MODES == SECURITY_MODES
    assert not hasattr(harness, "FLOCKING_SECURITY") and not hasattr(harness, "LLIC_MASTER_SECURITY")
