"""Whom the agent trusts: the coordinator's CA, taken from a file or fetched once and checked
against the hash in the join string before anything secret is sent (kubeadm's discovery
with a CA cert hash). A mismatch is a refusal, never a warning."""

from __future__ import annotations

import ssl
from pathlib import Path

from nodeagent import http_client
from nodeagent.atomic import atomic_write
from nodeagent.wire.joinstring import ca_hash

KEPT_CA = "ca.crt"  # in the state dir: the CA fetched once and checked against the pin


class TrustError(Exception):
    """The coordinator's CA cannot be trusted: final (a wrong pin is an attack or a mistake)."""


class CAUnreachable(TrustError):
    """The CA could not be fetched (no answer, or a 5xx): an outage, worth waiting out."""


def trusted_ca(ca_file: str | None, state_dir: Path) -> Path:
    """The CA an https coordinator is verified against: the config's coordinator.caFile, else
    the one the join string pinned, kept in the state dir. The daemon and a phase's child
    process (for its artifact downloads) trust the same one."""
    return Path(ca_file) if ca_file else state_dir / KEPT_CA


def context_for(ca_file: Path) -> ssl.SSLContext:
    """Verify the coordinator against this CA only (and its certificate's names)."""
    return ssl.create_default_context(cafile=str(ca_file))


def unverified_context() -> ssl.SSLContext:
    """Only to fetch the CA certificate, which is then checked against the pin. A bare context:
    create_default_context() would load the system's whole CA bundle (MBs the idle agent
    would keep) only to ignore it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def fetch_pinned_ca(url: str, pin: str, destination: Path, proxy: str | None,
                          timeout: float) -> None:
    """Fetch the coordinator's CA, check it against pin, keep it at destination."""
    pem = await pinned_ca(url, pin, proxy, timeout)
    atomic_write(destination, pem.encode(), mode=0o644)


# Who pinned the CA, and the operator's way out when the coordinator presents another: the
# join string's pin (a node joining) and a pivot's move target's (an agent following it).
JOIN_STRING = ("the join string", "check join: in the agent's config against the string "
               "`coordinator join-token create CLUSTER` printed (or create a new one)")
MOVE_TARGET = ("the move target", "it is the pivot's --to-ca: `coordinator pivot --abort`, "
               "then pivot again with the target's own CA")


async def pinned_ca(url: str, pin: str, proxy: str | None, timeout: float,
                    pinned_by: tuple[str, str] = JOIN_STRING) -> str:
    """The CA certificate (PEM) the coordinator at url presents, once checked against pin
    (pinned_by: who pinned it and what to do when another is presented, for the refusal)."""
    source = url.rstrip("/") + "/v1/ca.crt"
    try:
        # Not kept alive: its unverified context is the only one of its kind, and no call
        # after it would use the connection.
        reply = await http_client.request("GET", source, proxy=proxy, timeout=timeout,
                                          context=unverified_context(), keep_alive=False)
    except http_client.TransportError as exc:
        raise CAUnreachable(str(exc)) from None
    if reply.status >= 500:
        raise CAUnreachable(f"{source} answered HTTP {reply.status}")
    if reply.status != 200:
        raise TrustError(f"{source} answered HTTP {reply.status}: is this a coordinator?")
    pem = reply.body.decode(errors="replace")
    try:
        presented = ca_hash(pem)
    except ValueError:
        raise TrustError(f"{source} did not answer with a PEM certificate") from None
    if presented != pin:
        raise TrustError(mismatch(url, presented, pin, pinned_by))
    return pem


def mismatch(url: str, presented: str, pin: str, pinned_by: tuple[str, str]) -> str:
    """Why a coordinator presenting another CA than the pinned one is not trusted, and what to
    do: either the pin is wrong or something between this node and the coordinator answers."""
    who, remedy = pinned_by
    return (f"the coordinator at {url} presented CA {presented}, but {who} pins {pin}: "
            f"refusing to trust it. Either {who} is wrong ({remedy}), or something between "
            "this node and the coordinator answers in its place")
