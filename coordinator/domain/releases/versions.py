"""Which Kubernetes version a spec may move a cluster to (`cluster apply`, `upgrade plan -f`),
judged before anything is stored or drained, from what the cluster runs: the stored spec's
settings.kubernetes.version and the version each machine was last brought to
(Machine.kubernetes), so that an upgrade still under way counts its machines left behind.

The rules, from Kubernetes' version skew policy and kubeadm's upgrade policy
(cmd/kubeadm/app/phases/upgrade/policy.go):
- a version change is an upgrade: it comes with a new release, or no machine already
  deployed would run it while new ones install it;
- one minor at a time from the oldest version the cluster runs: kubeadm refuses to upgrade
  the control plane by more (and, with the kube-apiservers of an HA control plane within one
  minor of each other and every kubelet at most one minor behind, the skew stays within
  Kubernetes' policy, which lets kubelets be three behind but never newer);
- no downgrade, unless forced (`--allow-downgrade`), and then one minor at most, as kubeadm
  downgrades.
Pure: the spec, the machines and the operator's flag in, the problem out."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from coordinator.domain.model import (
    ADMITTED_STATES,
    ClusterSpec,
    Machine,
    MachineState,
    pending_items,
)
from nodeagent.wire.validation import InvalidDocument, Problem

FIELD = "settings.kubernetes.version"
_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-(\S+))?$")
# States whose machines run nothing the spec installs: not approved yet, or leaving.
_IDLE = frozenset({MachineState.UNINITIALIZED, MachineState.PENDING, MachineState.DELETING})


@dataclass(frozen=True, order=True)
class Version:
    """MAJOR.MINOR.PATCH[-PRE], ordered as semantic versions are (a pre-release before its
    release); the text as written is kept for messages."""

    major: int
    minor: int
    patch: int
    released: bool  # False for a pre-release (1.34.0-rc.1 < 1.34.0)
    pre: str
    text: str = field(compare=False)

    @property
    def series(self) -> str:
        return f"{self.major}.{self.minor}"

    def minors_above(self, other: Version) -> int:
        """How many minor releases self is above other (negative: below); a major apart
        counts as far apart."""
        if self.major != other.major:
            return 1000 * (self.major - other.major)
        return self.minor - other.minor


def parse(text: str) -> Version | None:
    found = _SEMVER.match(text.strip().removeprefix("v"))
    if found is None:
        return None
    pre = found[4] or ""
    return Version(int(found[1]), int(found[2]), int(found[3]), not pre, pre, text)


@dataclass(frozen=True)
class Running:
    """The versions the cluster runs, each with who runs it (the stored spec, machines)."""

    by_version: dict[Version, tuple[str, ...]]

    @property
    def lowest(self) -> Version:
        return min(self.by_version)

    @property
    def highest(self) -> Version:
        return max(self.by_version)

    def shown(self) -> str:
        return ", ".join(f"{v.text} ({_few(who)})" for v, who in sorted(self.by_version.items()))


def running(before: ClusterSpec, machines: Iterable[Machine]) -> Running | None:
    """What the cluster runs, or None when nothing may have installed Kubernetes yet (no
    machine approved past Pending: any version may be chosen). A machine that recorded no
    version (Prepare, or stored before versions were recorded) counts at the stored spec's."""
    stored = parse(before.settings.kubernetes.version or "")
    found: dict[Version, list[str]] = {}
    for machine in machines:
        if machine.state in _IDLE:
            continue
        version = parse(machine.kubernetes) or stored
        if version is not None:
            found.setdefault(version, []).append(machine.hostname)
    if not found or stored is None:
        return None
    found.setdefault(stored, []).insert(0, "the stored spec")
    return Running({v: tuple(who) for v, who in found.items()})


def allowed(now: Running, force: bool = False) -> str:
    """The versions a change may go to, as the operator reads them: e.g. "1.33.x from 1.33.4,
    or 1.34.x"."""
    low, high = now.lowest, now.highest
    top = f"{low.major}.{low.minor + 1}.x"
    if force:
        floor = f"{high.major}.{max(high.minor - 1, 0)}.x"
        return f"{floor} to {top}" if floor != top else top
    if high.minors_above(low) > 1:
        return (f"none until the machines at {low.text} reach {high.series}: they are more "
                f"than one minor behind {high.text}")
    if high.minors_above(low) == 1:
        return f"{high.series}.x from {high.text}"
    return f"{high.series}.x from {high.text}, or {top}"


@dataclass(frozen=True)
class Verdict:
    """What a version change is: refused (problem, naming the allowed versions), or
    accepted, and then whether it is a downgrade the operator forced."""

    problem: str | None = None
    downgrade: bool = False


def judge(before: ClusterSpec | None, after: ClusterSpec, machines: Iterable[Machine],
          force: bool = False) -> Verdict:
    """The rules of this module for `after` over the stored `before`. A first apply, an
    unchanged version, and a spec (stored or new) that names none are not judged."""
    if before is None:
        return Verdict()
    old, new = before.settings.kubernetes.version, after.settings.kubernetes.version
    if new is None or old is None or old == new:
        return Verdict()
    if after.release == before.release:
        return Verdict(f"changed from {old} to {new} with release still {after.release!r}: a "
                       "version change is an upgrade; give it a new release, or machines "
                       "already deployed keep the old version while new ones install the new")
    now = running(before, machines)
    target = parse(new)
    if now is None or target is None:
        return Verdict()
    low, high = now.lowest, now.highest
    if target.minors_above(low) > 1:
        return Verdict(f"{new} skips a minor: the cluster runs {now.shown()}, and Kubernetes "
                       f"upgrades one minor at a time (kubeadm refuses more); allowed: "
                       f"{allowed(now, force)}")
    if high.minors_above(low) > 1 and not force:
        return Verdict(f"{new} cannot be applied: the cluster runs {now.shown()}; allowed: "
                       f"{allowed(now)}")
    if target >= high:
        return Verdict()
    if not force:
        return Verdict(f"{new} is a downgrade: the cluster runs {now.shown()}; allowed: "
                       f"{allowed(now)} (a downgrade only when forced: cluster apply "
                       "--allow-downgrade)")
    if high.minors_above(target) > 1:
        return Verdict(f"{new} is more than one minor below {high.text}, which the cluster "
                       f"runs ({now.shown()}): kubeadm downgrades one minor at a time; allowed: "
                       f"{allowed(now, force)}")
    return Verdict(downgrade=True)


def _few(names: tuple[str, ...], shown: int = 3) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def admitted(before: ClusterSpec | None, after: ClusterSpec, machines: Iterable[Machine],
             force: bool = False) -> tuple[ClusterSpec, Verdict]:
    """after as it is stored (its allowDowngrade the coordinator's: this change's forced
    downgrade, or the stored one's while the version stays), with the verdict; or
    InvalidDocument naming settings.kubernetes.version and the allowed versions."""
    verdict = judge(before, after, machines, force)
    if verdict.problem:
        raise InvalidDocument([Problem(FIELD, verdict.problem)])
    kept = before is not None and \
        before.settings.kubernetes.version == after.settings.kubernetes.version
    forced = before.settings.kubernetes.allow_downgrade if kept and before else verdict.downgrade
    kubernetes = after.settings.kubernetes.model_copy(update={"allow_downgrade": forced})
    settings = after.settings.model_copy(update={"kubernetes": kubernetes})
    return after.model_copy(update={"settings": settings}), verdict


def warnings(before: ClusterSpec | None, after: ClusterSpec, verdict: Verdict) -> list[str]:
    """What an accepted change should warn of, the same words for `cluster apply` and
    `upgrade plan -f`: a downgrade forced, or else a release older than the stored one
    (nothing is rolled back, which an operator going back to an old file may not expect)."""
    if before is None:
        return []
    if verdict.downgrade:
        return [downgrade_text(before, after)]
    old, new = _release(before.release), _release(after.release)
    if old is None or new is None or new >= old:
        return []
    return [f"release {after.release} is older than {before.release}, the cluster's: nothing "
            "is rolled back. Each machine runs only the items new or changed since it last "
            f"ran (none when they are as they were) and is recorded at {after.release}; to "
            "undo what items did, write items that undo it"]


def _release(text: str) -> tuple[int, ...] | None:
    """A release written as dotted numbers (v1.2, 2.1.0), comparable; None for any other."""
    parts = text.strip().removeprefix("v").split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def downgrade_text(before: ClusterSpec, after: ClusterSpec) -> str:
    """The event a forced downgrade records."""
    return (f"Kubernetes {before.settings.kubernetes.version} -> "
            f"{after.settings.kubernetes.version} at release {after.release}: a downgrade, "
            "forced (--allow-downgrade); the package items may install older packages")


def behind(spec: ClusterSpec, machine: Machine) -> bool:
    """Whether the machine's items brought it to an older Kubernetes version than spec's (a
    version it did not record, or a spec that names none: not known to be)."""
    mine, wanted = parse(machine.kubernetes), parse(spec.settings.kubernetes.version or "")
    return mine is not None and wanted is not None and mine < wanted


def control_plane_behind(spec: ClusterSpec, machines: Iterable[Machine]) -> str | None:
    """The hostname of a manager admitted into Deploy whose control plane is older than spec's
    version: no machine joins with spec's kubelet until it is upgraded, since a kubelet must
    never be newer than a kube-apiserver it talks to (the skew policy)."""
    return next((m.hostname for m in _lagging(spec, machines)), None)


def _lagging(spec: ClusterSpec, machines: Iterable[Machine]) -> Iterable[Machine]:
    return (m for m in machines if m.role == "manager" and m.state in ADMITTED_STATES
            and behind(spec, m))


def join_wait(spec: ClusterSpec, machine: Machine, peers: Sequence[Machine]) -> str:
    """What a prepared machine held by control_plane_behind waits for, for its note: "" when
    it is not held."""
    if machine.state is not MachineState.PREPARE or pending_items(spec, machine, "prepare"):
        return ""
    lagging = next(iter(_lagging(spec, (m for m in peers if m.cluster == machine.cluster))),
                   None)
    if lagging is None:
        return ""
    paused = (f" (upgrades are paused: coordinator upgrade resume {spec.name})"
              if spec.settings.upgrade.paused else "")
    return (f"prepared; waits for the control plane to reach Kubernetes "
            f"{spec.settings.kubernetes.version}: manager {lagging.hostname} runs "
            f"{lagging.kubernetes}, and a kubelet never joins an older API server; the managers "
            f"upgrade first{paused}")
