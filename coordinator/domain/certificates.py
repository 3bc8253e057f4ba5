"""The control plane's certificate expiry as the status shows it: the client certificate of
the kubeconfig the coordinator reaches the cluster through (kubeadm signs admin.conf's for a
year; `kubeadm upgrade` and `kubeadm certs renew` sign it anew), by subject and dates only, and
a warning WARN_SECONDS ahead of its expiry saying what to run. Once it expired every drain,
Node check and removal fails, so the warning comes while a renewal can still drain."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.domain.durations import duration, utc
from coordinator.domain.kubeaccess import KubeAccess
from coordinator.domain.kubeconfig import client_certificate

WARN_SECONDS = 30 * 86400.0
DAY = 86400.0


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


def certificate_status(cluster: str, access: KubeAccess, text: str, now: float) -> Certificates:
    """What the status shows of the client certificate of the kubeconfig text, which is the
    one access names."""
    source = source_of(access)
    try:
        found = client_certificate(text)
    except ValueError as exc:
        return Certificates(source, problem=f"the kubeconfig is unusable: {exc}")
    if found is None:
        return Certificates(source, problem="its user has no client-certificate-data (a token, "
                            "or a certificate in a file of its own): no expiry watched")
    left = found.not_after - now
    shown = Certificates(source, found.subject, found.not_after, left)
    if left > WARN_SECONDS:
        return shown
    what = (f"the client certificate of the kubeconfig the coordinator uses ({source}, "
            f"{found.subject})")
    if left <= 0:
        warning = (f"{what} expired at {utc(found.not_after)}: the coordinator cannot reach "
                   "the API server (drains, Node checks and removals fail)")
    else:
        within = f"{int(left // DAY)} days" if left >= DAY else duration(left)
        warning = f"{what} expires at {utc(found.not_after)}, in {within}"
    return Certificates(source, found.subject, found.not_after, left, warning=warning,
                        remedy=_remedy(cluster, access, left <= 0))
