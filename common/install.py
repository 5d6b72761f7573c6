"""`condor-selforg install poold|faultd|llic`: put the files an administrator needs in place.

The wheel carries them (common/deploy_files: systemd units, example configs, HTCondor config
snippets); this command installs them at FHS paths with the owners and modes docs/admin.md gives, as
a Debian package would install its conffiles:

- a file that is missing is created;
- a file equal to what would be installed is left alone (owner and mode are still set right), so
  running the command again changes nothing;
- a file that differs is replaced only if it is what this command installed last time (recorded
  with its SHA-256 in /var/lib/condor-selforg/installed.json): an upgrade. A file the
  administrator changed (or wrote before) is kept, and the new version goes beside it as
  `FILE.new`, with a line saying so, as dpkg does with `.dpkg-dist`.

`--dry-run` prints the same lines and changes nothing; `--root DIR` installs into another root (a
chroot, an image), reading owners from DIR/etc/passwd and DIR/etc/group. The units' ExecStart
names the scripts of the installation running this command (its bin directory, `--bindir`). The
HTCondor snippet goes into LOCAL_CONFIG_DIR, read from HTCondor's configuration (through the
gateway) when installing into this machine; `--condor-config-dir` says it explicitly.

The plan (`plan()`) is pure: what goes where, with which owner and mode; `install()` compares it
with the disk and carries it out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from common.cli import add_command, new_parser, run_main
from common.config import ConfigError

INSTALL_HELP = (__doc__ or "").split("\n\n", 1)[1].rsplit("\n\n", 1)[0]
FILES = Path(__file__).resolve().parent / "deploy_files"
MANIFEST = PurePosixPath("/var/lib/condor-selforg/installed.json")
DEFAULT_CONDOR_CONFIG_DIR = PurePosixPath("/etc/condor/config.d")
UNIT_BINDIR = "/opt/condor-selforg/bin"  # what the packaged units say; replaced by the real one
COMPONENTS = ("poold", "faultd", "llic")


@dataclass(frozen=True)
class Item:
    """One directory or file to install: `source` is a file of deploy_files (None: a directory)."""

    target: PurePosixPath
    mode: int
    owner: str = "root"
    group: str = "root"
    source: str | None = None
    what: str = ""  # config, unit, condor: for the summary

    @property
    def is_dir(self) -> bool:
        """Whether this item is a directory (it has no source file)."""
        return self.source is None


UNITS_DIR = PurePosixPath("/etc/systemd/system")


def unit_user(daemon: str, units_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The user the installed `<daemon>.service` runs its daemon as, drop-ins (`.service.d/*.conf`,
    in name order, the last `User=` winning) included: root when no file says; None when the
    unit is not installed. What check-config takes its daemon's user from."""
    base = Path(units_dir if units_dir is not None else UNITS_DIR)
    unit = base / f"{daemon}.service"
    if not unit.is_file():
        return None
    user = "root"
    for path in [unit, *sorted((base / f"{daemon}.service.d").glob("*.conf"))]:
        section = ""
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                section = line
            elif section == "[Service]" and line.startswith("User="):
                user = line.removeprefix("User=").strip() or "root"
    return user


def daemon_user(daemon: str, shipped: str | None) -> str | None:
    """The user other than root that `daemon` runs as (None: root): the installed unit's, drop-ins
    included, else `shipped`, its unit's as the wheel ships it. Whom `keys new-node` gives the
    node's key and check-config checks the keys against."""
    user = unit_user(daemon) or shipped
    return None if user == "root" else user


def plan(component: str, *, condor_config_dir: PurePosixPath, condor_only: bool = False) -> list[Item]:
    """What `install COMPONENT` puts where (docs/admin.md has the table)."""
    etc, units, cdir = PurePosixPath("/etc"), UNITS_DIR, condor_config_dir
    if component == "poold":
        items = [
            Item(etc / "poold", 0o750, "condor", "condor"),
            Item(etc / "poold/poold.toml", 0o640, "condor", "condor", "config/poold.toml", "config"),
            Item(etc / "poold/policy.toml", 0o640, "condor", "condor", "config/policy.toml", "config"),
            Item(units / "poold.service", 0o644, source="systemd/poold.service", what="unit"),
            Item(cdir / "60-poold-pool.conf", 0o644, source="condor/60-poold-pool.conf", what="condor"),
        ]
    elif component == "faultd":
        items = [
            Item(etc / "faultd", 0o750),
            Item(etc / "faultd/faultd.toml", 0o640, source="config/faultd.toml", what="config"),
            Item(units / "faultd.service", 0o644, source="systemd/faultd.service", what="unit"),
            Item(cdir / "60-faultd-pool.conf", 0o644, source="condor/60-faultd-pool.conf", what="condor"),
        ]
    elif component == "llic":
        items = [
            Item(etc / "llic", 0o755),
            Item(etc / "llic/llic_config", 0o644, source="config/llic_config", what="config"),
        ]
    else:
        raise ConfigError(f"unknown component {component!r}: one of {', '.join(COMPONENTS)}")
    if condor_only:
        items = [i for i in items if i.what == "condor"]
        if not items:
            raise ConfigError(f"{component} has no HTCondor configuration snippet")
    return items


def render(item: Item, bindir: str, files: Path = FILES) -> bytes:
    """An item's content as installed: units get this installation's bin directory."""
    assert item.source is not None
    data = (files / item.source).read_bytes()
    if item.what == "unit":
        data = data.replace(UNIT_BINDIR.encode(), bindir.rstrip("/").encode())
    return data


def digest(data: bytes) -> str:
    """SHA-256 of a file's content, as the manifest records it."""
    return hashlib.sha256(data).hexdigest()


class Accounts:
    """User and group ids from a root's /etc/passwd and /etc/group (so `--root` works for a
    chroot whose ids differ from this machine's)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.users = self._read(root / "etc/passwd")
        self.groups = self._read(root / "etc/group")

    @staticmethod
    def _read(path: Path) -> dict[str, int]:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return {}
        out = {}
        for line in lines:
            parts = line.split(":")
            if len(parts) >= 3 and parts[2].isdigit():
                out[parts[0]] = int(parts[2])
        return out

    def ids(self, user: str, group: str) -> tuple[int, int]:
        """(uid, gid); ConfigError naming the file if either is unknown."""
        if user not in self.users:
            raise ConfigError(
                f"user {user!r} is not in {self.root / 'etc/passwd'}: install HTCondor first "
                "(its package makes the condor user)"
            )
        if group not in self.groups:
            raise ConfigError(f"group {group!r} is not in {self.root / 'etc/group'}")
        return self.users[user], self.groups[group]


@dataclass
class Step:
    """One line of what install did (or would do)."""

    action: str  # create, update, unchanged, keep, fix
    path: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.action:<10} {self.path}{'  ' + self.detail if self.detail else ''}"


class Installer:
    """Carries out plans against a root directory; see the module docstring."""

    def __init__(self, root: Path, bindir: str, *, dry_run: bool, files: Path = FILES) -> None:
        self.root = root
        self.bindir = bindir
        self.dry_run = dry_run
        self.files = files
        self.accounts = Accounts(root)
        self.manifest_path = self.on_disk(MANIFEST)
        self.manifest: dict[str, str] = self._load_manifest()
        self.steps: list[Step] = []

    def on_disk(self, target: PurePosixPath) -> Path:
        """Where a target path is under the root."""
        return self.root / str(target).lstrip("/")

    def _load_manifest(self) -> dict[str, str]:
        try:
            data = json.loads(self.manifest_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise ConfigError(f"{self.manifest_path}: unreadable install record ({e})") from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ConfigError(f"{self.manifest_path}: not an install record")
        return data

    def install(self, items: Iterable[Item]) -> list[Step]:
        """Compare each item with the disk and create, update, keep or leave it."""
        for item in items:
            uid, gid = self.accounts.ids(item.owner, item.group)
            if item.is_dir:
                self._directory(item, uid, gid)
            else:
                self._file(item, uid, gid)
        if not self.dry_run:
            self.manifest_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.manifest_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.manifest, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, self.manifest_path)
        return self.steps

    def _note(self, action: str, target: PurePosixPath, detail: str = "") -> None:
        self.steps.append(Step(action, str(target), detail))

    @staticmethod
    def _owner_text(item: Item) -> str:
        return f"{item.mode:04o} {item.owner}:{item.group}"

    def _directory(self, item: Item, uid: int, gid: int) -> None:
        path = self.on_disk(item.target)
        if not path.is_dir():
            self._note("create", item.target, f"directory {self._owner_text(item)}")
            if not self.dry_run:
                path.mkdir(parents=True, exist_ok=True)
                self._set_owner(path, item, uid, gid)
            return
        self._fix(path, item, uid, gid)

    def _file(self, item: Item, uid: int, gid: int) -> None:
        path = self.on_disk(item.target)
        new = render(item, self.bindir, self.files)
        key = str(item.target)
        if not path.exists():
            self._note("create", item.target, self._owner_text(item))
            self._write(path, new, item, uid, gid)
        else:
            current = path.read_bytes()
            if current == new:
                self._note("unchanged", item.target)
                self._fix(path, item, uid, gid)
            elif self.manifest.get(key) == digest(current):
                self._note("update", item.target, "(as installed before: not changed here)")
                self._write(path, new, item, uid, gid)
            else:
                side = path.with_name(path.name + ".new")
                same = side.exists() and side.read_bytes() == new
                self._note(
                    "keep",
                    item.target,
                    f"(changed here); the new version {'is' if same else 'goes'} in {item.target}.new",
                )
                if not same:
                    self._write(side, new, item, uid, gid)
        self.manifest[key] = digest(new)

    def _write(self, path: Path, data: bytes, item: Item, uid: int, gid: int) -> None:
        if self.dry_run:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.condor-selforg-tmp")
        tmp.write_bytes(data)
        self._set_owner(tmp, item, uid, gid)
        os.replace(tmp, path)

    def _set_owner(self, path: Path, item: Item, uid: int, gid: int) -> None:
        os.chown(path, uid, gid)
        os.chmod(path, item.mode)

    def _fix(self, path: Path, item: Item, uid: int, gid: int) -> None:
        st = path.stat()
        if (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (item.mode, uid, gid):
            return
        self._note("fix", item.target, f"owner and mode to {self._owner_text(item)}")
        if not self.dry_run:
            self._set_owner(path, item, uid, gid)


def this_bindir(root: Path) -> str:
    """The bin directory of this installation, as seen from inside `root`."""
    scripts = Path(sysconfig.get_path("scripts"))
    if root != Path("/") and scripts.is_relative_to(root):
        return "/" + str(scripts.relative_to(root))
    return str(scripts)


def condor_config_dir(root: Path) -> PurePosixPath:
    """LOCAL_CONFIG_DIR as this machine's HTCondor configuration says (its first directory);
    /etc/condor/config.d when installing into another root or when HTCondor cannot say."""
    if root != Path("/"):
        return DEFAULT_CONDOR_CONFIG_DIR
    import trio

    from common.condor import Gateway, GatewayError

    async def ask() -> str | None:
        async with Gateway(timeout=20) as gw:
            return (await gw.local_config(["LOCAL_CONFIG_DIR"])).get("LOCAL_CONFIG_DIR")

    try:
        value = trio.run(ask)
    except GatewayError as e:
        print(f"condor-selforg: HTCondor's LOCAL_CONFIG_DIR not readable ({e}); using "
              f"{DEFAULT_CONDOR_CONFIG_DIR}", file=sys.stderr)  # fmt: skip
        return DEFAULT_CONDOR_CONFIG_DIR
    first = (value or "").replace(",", " ").split()
    return PurePosixPath(first[0]) if first else DEFAULT_CONDOR_CONFIG_DIR


NEXT_STEPS = {
    "poold": [
        "the ring key: one for the federation, mode 0600, owner condor, at /etc/poold/ring.key",
        "edit /etc/poold/poold.toml ([pool] name, [ring] advertise and bootstrap) and policy.toml",
        "the HTCondor snippet on every host of the pool (condor-selforg install poold --condor-only), "
        "then restart HTCondor once",
        "poold check-config /etc/poold/poold.toml; systemctl daemon-reload; systemctl enable --now poold",
    ],
    "faultd": [
        "the pool's ring key, mode 0600, owner root, at /etc/faultd/ring.key (the same on every machine)",
        "edit /etc/faultd/faultd.toml (original_manager on the central manager; [ring] node_name, bind, "
        "bootstrap)",
        "restart HTCondor once (the snippet); then faultd check-config /etc/faultd/faultd.toml; "
        "systemctl daemon-reload; systemctl enable --now faultd",
    ],
    "llic": ["edit /etc/llic/llic_config for the site (users' own files replace it)"],
}


def build_parser() -> argparse.ArgumentParser:
    """condor-selforg's parser: install, and show (print a packaged file)."""
    parser = new_parser(
        "condor-selforg",
        "Install the self-organizing layer's files (systemd units, example configs, HTCondor "
        "snippets) from this installation.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    install = add_command(
        sub,
        "install",
        "put a component's files in place (idempotent; never overwrites a changed config)",
        INSTALL_HELP,
    )
    install.add_argument(
        "components", nargs="+", choices=COMPONENTS, metavar="COMPONENT", help="poold, faultd, llic"
    )
    install.add_argument("--root", type=Path, default=Path("/"), help="install into this root directory")
    install.add_argument("--dry-run", action="store_true", help="print what would be done; change nothing")
    install.add_argument(
        "--condor-only",
        action="store_true",
        help="only the HTCondor config snippet (the hosts of a poold pool other than its central manager)",
    )
    install.add_argument(
        "--bindir", help="where the units find poold and faultd (default: this installation's)"
    )
    install.add_argument(
        "--condor-config-dir",
        type=PurePosixPath,
        help="where the HTCondor snippet goes (default: HTCondor's LOCAL_CONFIG_DIR)",
    )
    show = add_command(sub, "show", "print a packaged file (e.g. poold.toml), or list them all")
    show.add_argument("name", nargs="?", help="a file name, e.g. faultd.service or 60-poold-pool.conf")
    return parser  # fmt: skip


def packaged_files() -> list[str]:
    """Every packaged file, relative to deploy_files."""
    return sorted(str(p.relative_to(FILES)) for p in FILES.rglob("*") if p.is_file())


def _show(name: str | None) -> int:
    names = packaged_files()
    if name is None:
        print("\n".join(names))
        return 0
    match = [n for n in names if n == name or Path(n).name == name]
    if not match:
        raise ConfigError(f"no packaged file {name!r}; condor-selforg show lists them")
    sys.stdout.write((FILES / match[0]).read_text())
    return 0


def _install(args: argparse.Namespace) -> int:
    root = args.root.resolve()
    if not root.is_dir():
        raise ConfigError(f"--root {args.root}: not a directory")
    cdir = args.condor_config_dir or condor_config_dir(root)
    installer = Installer(root, args.bindir or this_bindir(root), dry_run=args.dry_run)
    components: Sequence[str] = list(dict.fromkeys(args.components))
    items = [i for c in components for i in plan(c, condor_config_dir=cdir, condor_only=args.condor_only)]
    try:
        steps = installer.install(items)
    except PermissionError as e:
        raise ConfigError(f"{e.filename}: {e.strerror} (run as root, or --dry-run)") from None
    where = "" if root == Path("/") else f" under {root}"
    print(f"{'would install' if args.dry_run else 'installed'}{where}:")
    for step in steps:
        print(f"  {step}")
    kept = [s for s in steps if s.action == "keep"]
    if kept:
        print(f"{len(kept)} file(s) changed here kept; compare with the .new beside each and merge by hand")
    if not args.dry_run and not args.condor_only:
        print("next:")
        for c in components:
            print("\n".join(f"  {c}: {line}" for line in NEXT_STEPS[c]))
    return 0


def main(argv: list[str] | None = None) -> int:
    """condor-selforg's entry point."""
    args = build_parser().parse_args(argv)
    from common.logging import configure_logging

    configure_logging("condor-selforg", level="warning")
    if args.command == "show":
        return run_main("condor-selforg", lambda: _show(args.name))
    return run_main("condor-selforg", lambda: _install(args))
