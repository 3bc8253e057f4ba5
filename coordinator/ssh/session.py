"""The SSH seam: push-install the agent onto a host, and retarget agents, with asyncssh.

Host keys are always verified, against a known_hosts file or a pinned key; nothing turns
that off. Commands that need root run through `sudo -n` unless the login is root.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from coordinator.ssh.install import (
    AGENT_CONFIG,
    PROBE,
    BootstrapError,
    HostProfile,
    agent_config,
    install_argv,
    package_pattern,
    profile,
    retargeted_config,
    service_argv,
)
from nodeagent.wire.contract import Role

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
Say = Callable[[str], None]


class SshError(Exception):
    """Connecting or a remote step failed; the message names the host and the step."""


@dataclass(frozen=True)
class SshTarget:
    user: str
    host: str
    port: int = 22

    @classmethod
    def parse(cls, text: str) -> SshTarget:
        """user@host, user@host:port or user@[v6]:port."""
        match = re.fullmatch(r"([^@\s]+)@(\[[0-9A-Fa-f:.]+\]|[^:@\s\[\]]+)(?::(\d+))?", text)
        if not match:
            raise ValueError(f"{text!r}: expected user@host or user@host:port")
        port = int(match.group(3) or 22)
        if not 0 < port < 65536:
            raise ValueError(f"{text!r}: port must be a number from 1 to 65535")
        return cls(match.group(1), match.group(2).strip("[]"), port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}" + (f":{self.port}" if self.port != 22 else "")


@dataclass(frozen=True)
class HostTrust:
    """Which host keys to accept: a known_hosts file, or one pinned public key."""

    known_hosts: Path | None = None
    pinned_key: str | None = None

    def for_asyncssh(self) -> str | tuple[list[asyncssh.SSHKey], list[asyncssh.SSHKey],
                                         list[asyncssh.SSHKey]]:
        if self.pinned_key:
            try:
                key = asyncssh.import_public_key(self.pinned_key)
            except (asyncssh.KeyImportError, ValueError) as exc:
                raise SshError(f"--host-key: not an OpenSSH public key ({exc})") from None
            return [key], [], []
        path = (self.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()
        if not path.is_file():
            raise SshError(f"no known_hosts file at {path}: pass --known-hosts FILE or "
                           "--host-key 'TYPE BASE64' (host keys are never accepted unchecked)")
        return str(path)

    def describe(self) -> str:
        if self.pinned_key:
            return "the pinned --host-key"
        return str((self.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser())


class Session:
    def __init__(self, target: SshTarget, connection: asyncssh.SSHClientConnection) -> None:
        self.target = target
        self.connection = connection

    async def run(self, argv: list[str] | str, step: str) -> str:
        command = argv if isinstance(argv, str) else shlex.join(argv)
        result = await self.connection.run(command, check=False)
        if result.exit_status != 0:
            output = f"{result.stderr or ''}{result.stdout or ''}".strip()[-2000:]
            raise SshError(f"{self.target}: {step} failed (exit {result.exit_status}): {output}")
        return str(result.stdout or "")

    async def put(self, local: Path, remote: str) -> None:
        async with self.connection.start_sftp_client() as sftp:
            await sftp.put(str(local), remote)

    async def put_text(self, text: str, remote: str) -> None:
        async with self.connection.start_sftp_client() as sftp, \
                sftp.open(remote, "w") as handle:
            await handle.write(text)

    @contextlib.asynccontextmanager
    async def scratch_dir(self) -> AsyncIterator[str]:
        """A private temp directory on the host, removed afterwards."""
        path = (await self.run(["mktemp", "-d", "/tmp/nodeagent.XXXXXX"], "mktemp")).strip()
        try:
            yield path
        finally:
            with contextlib.suppress(SshError, asyncssh.Error, OSError):
                await self.run(["rm", "-rf", path], "cleanup")

    async def install_file(self, host: HostProfile, text: str, path: str, scratch: str) -> None:
        """Replace path with text atomically (write beside it, then rename), mode 0640."""
        staged = f"{scratch}/{Path(path).name}"
        await self.put_text(text, staged)
        await self.run([*host.sudo, "sh", "-c",
                        'mkdir -p "$(dirname "$2")" && install -m 0640 "$1" "$2.new" '
                        '&& mv -f "$2.new" "$2"', "sh", staged, path], f"writing {path}")


@contextlib.asynccontextmanager
async def session(target: SshTarget, key: Path, trust: HostTrust,
                  timeout: float = 15) -> AsyncIterator[Session]:
    known_hosts = trust.for_asyncssh()
    try:
        connection = await asyncssh.connect(
            target.host, target.port, username=target.user, client_keys=[str(key)],
            known_hosts=known_hosts, agent_path=None, config=[], connect_timeout=timeout)
    except asyncssh.HostKeyNotVerifiable as exc:
        raise SshError(f"{target}: REFUSED: its host key is not the one in {trust.describe()} "
                       f"({exc.reason}). If the host was reinstalled, check its new key out "
                       "of band and update the known hosts") from None
    except asyncssh.PermissionDenied:
        raise SshError(f"{target}: the key {key} was not accepted") from None
    except asyncssh.KeyImportError as exc:
        raise SshError(f"--key {key}: not a usable private key ({exc})") from None
    except (OSError, asyncssh.Error) as exc:
        raise SshError(f"{target}: cannot connect: {exc}") from None
    async with connection:
        yield Session(target, connection)


async def _probe(ssh: Session, say: Say) -> HostProfile:
    try:
        host = profile(await ssh.run(PROBE, "detecting the OS"))
    except BootstrapError as exc:
        raise SshError(f"{ssh.target}: {exc}") from None
    say(f"{ssh.target}: {host.pretty_name}, {host.machine}, installs .{host.package_format}; "
        f"systemd {'running' if host.systemd else 'NOT running'}")
    return host


async def _restart_agent(ssh: Session, host: HostProfile, say: Say) -> bool:
    """Enable and (re)start the unit; False, said clearly, when the host has no systemd."""
    if not host.systemd:
        say(f"warning: {ssh.target} has no systemd (/run/systemd/system is missing): the agent "
            "is NOT running; start `nodeagent run` with the host's init system")
        return False
    await ssh.run(service_argv(host, "enable"), "enabling nodeagent.service")
    await ssh.run(service_argv(host, "restart"), "starting nodeagent.service")
    await ssh.run(service_argv(host, "is-active"), "checking nodeagent.service")
    say(f"{ssh.target}: nodeagent.service enabled and running")
    return True


async def install_agent(ssh: Session, packages: Path, join_string: str, role: Role | None,
                        say: Say) -> bool:
    """Copy and install the host's package, write its config, start it. Returns whether the
    agent runs now (False: no systemd to start it)."""
    host = await _probe(ssh, say)
    try:
        package = find_package(packages, host)
    except BootstrapError as exc:
        raise SshError(str(exc)) from None
    config = agent_config(join_string, role, "written by `coordinator machines add`")
    async with ssh.scratch_dir() as scratch:
        remote = f"{scratch}/{package.name}"
        await ssh.put(package, remote)
        say(f"{ssh.target}: copied {package.name}")
        await ssh.run(install_argv(host, remote), f"installing {package.name}")
        await ssh.install_file(host, config, AGENT_CONFIG, scratch)
        say(f"{ssh.target}: installed; {AGENT_CONFIG} holds the join string")
    return await _restart_agent(ssh, host, say)


async def retarget_agent(ssh: Session, url: str, say: Say) -> bool:
    """Point the host's agent at url and restart it; returns whether it was restarted."""
    host = await _probe(ssh, say)
    current = await ssh.run([*host.sudo, "cat", AGENT_CONFIG], f"reading {AGENT_CONFIG}")
    try:
        changed = retargeted_config(current, url)
    except BootstrapError as exc:
        raise SshError(f"{ssh.target}: {exc}") from None
    async with ssh.scratch_dir() as scratch:
        await ssh.install_file(host, changed, AGENT_CONFIG, scratch)
    say(f"{ssh.target}: coordinator.url is now {url}")
    return await _restart_agent(ssh, host, say)


def find_package(directory: Path, host: HostProfile) -> Path:
    """The one nodeagent package in directory that fits the host."""
    pattern = package_pattern(host)
    found = sorted(directory.glob(pattern))
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise BootstrapError(f"{what} {pattern} in {directory} (build with `make packages`, "
                             "or name the directory with --packages); need exactly one")
    return found[0]
