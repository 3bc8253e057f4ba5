"""The control plane's certificate expiry as the status shows it: the client certificate of
the kubeconfig the coordinator reaches the cluster through (kubeadm signs admin.conf's for a
year; `kubeadm upgrade` and `kubeadm certs renew` sign it anew) and the certificate its API
server serves, by subject and dates only, and a warning WARN_SECONDS ahead of an expiry saying
what to run. Once it expired every drain,
Node check and removal fails, so the warning comes while a renewal can still drain."""

from __future__ import annotations

from dataclasses import dataclass, replace

from coordinator.domain.durations import duration, utc
from coordinator.domain.nodes.kubeaccess import KubeAccess
from coordinator.domain.nodes.kubeconfig import ClientCertificate, client_certificate, server_of

WARN_SECONDS = 30 * 86400.0
DAY = 86400.0


@dataclass(frozen=True)
class Served:
    """The API server's serving certificate as its handshake showed it."""

    server: str
    subject: str = ""
    not_after: float | None = None
    expires_in_seconds: float | None = None
    problem: str = ""  # why it could not be read


@dataclass(frozen=True)
class Certificates:
    """What the status says of them: never a certificate, a key or a token."""

    source: str  # which kubeconfig: the one a manager reported, or the settings' file
    subject: str = ""
    not_after: float | None = None
    expires_in_seconds: float | None = None
    problem: str = ""  # why the expiry is not known
    warning: str = ""  # expires within WARN_SECONDS, or expired
    remedy: str = ""
    serving: Served | None = None  # None: not looked at (yet), or no https server


def source_of(access: KubeAccess) -> str:
    if access.path is not None:
        return f"settings.kubernetes.kubeconfig ({access.path})"
    return f"reported by {access.reporter}" if access.reporter else "reported by a manager"


def _remedy(cluster: str, access: KubeAccess, expired: bool) -> str:
    renew = ("on each manager `kubeadm certs renew all`, then restart its control-plane pods "
             "(kubeadm's certificate management)")
    if access.path is not None:
        return f"{renew}; then replace {access.path} with a manager's renewed /etc/kubernetes/admin.conf"
    release = ("a new release that changes settings.kubernetes.certificateRenewal (the kubeadm "
               "profile's certs-renew item renews them on every manager and reports the new "
               "kubeconfig), or a Kubernetes upgrade, which renews them too: `coordinator "
               f"upgrade plan {cluster} -f FILE`, then `coordinator cluster apply -f FILE`")
    if not expired:
        return (f"renew them before then: {release}; or {renew}: the agents send the renewed "
                "kubeconfig")
    return (f"{renew}: the agents send the renewed kubeconfig, which the coordinator takes (a "
            "renewal release would drain managers through the API it can no longer reach)")


def _served(server: str, found: ClientCertificate | str | None, now: float) -> Served | None:
    if found is None:
        return None
    if isinstance(found, str):
        return Served(server, problem=found)
    return Served(server, found.subject, found.not_after, found.not_after - now)


def _warning(what: str, where: str, subject: str, not_after: float, now: float) -> str:
    """What the status says of a certificate expiring within WARN_SECONDS ("" otherwise)."""
    left = not_after - now
    if left > WARN_SECONDS:
        return ""
    what = f"{what} ({where}, {subject})"
    if left <= 0:
        return (f"{what} expired at {utc(not_after)}: the coordinator cannot reach "
                "the API server (drains, Node checks and removals fail)")
    within = f"{int(left // DAY)} days" if left >= DAY else duration(left)
    return f"{what} expires at {utc(not_after)}, in {within}"


def certificate_status(cluster: str, access: KubeAccess, text: str, now: float,
                       serving: ClientCertificate | str | None = None) -> Certificates:
    """What the status shows of the client certificate of the kubeconfig text, which is the
    one access names, and of the certificate its API server serves (serving: what its
    handshake showed, or why it could not be read; None: not looked at)."""
    source = source_of(access)
    served = _served(server_of(text) or "", serving, now)
    try:
        found = client_certificate(text)
    except ValueError as exc:
        return Certificates(source, problem=f"the kubeconfig is unusable: {exc}", serving=served)
    warnings = [] if found is None else [_warning(
        "the client certificate of the kubeconfig the coordinator uses", source, found.subject,
        found.not_after, now)]
    if served is not None and served.not_after is not None:
        warnings.append(_warning("the API server's serving certificate", served.server,
                                 served.subject, served.not_after, now))
    warning = "; ".join(w for w in warnings if w)
    expired = min([c.not_after for c in (found, served) if c is not None and c.not_after],
                  default=now + 1) <= now
    shown = Certificates(source, serving=served, warning=warning,
                         remedy=_remedy(cluster, access, expired) if warning else "")
    if found is None:
        return replace(shown, problem="its user has no client-certificate-data (a token, or a "
                       "certificate in a file of its own): no expiry watched")
    return replace(shown, subject=found.subject, not_after=found.not_after,
                   expires_in_seconds=found.not_after - now)
