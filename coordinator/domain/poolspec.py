"""What a cluster asks of the machine pool (`pool:` in its spec): how many managers and workers,
and a selector each, with the one reading of a machine's facts every selector is judged by.

A pool machine is any machine registered with a pool join token (its cluster is `POOL`); a
cluster that says `pool:` claims the approved ones matching its selectors (domain/pool/
claims.py). Kept apart from model.py, which imports it, so that the spec's model stays one
module's job and the selector's reading of facts another's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from coordinator.domain.labels import checked
from nodeagent.wire.protocol import SpecModel

GIB = 1024 ** 3
DiskType = Literal["ssd", "hdd"]


class DiskSelector(SpecModel):
    """A disk the machine must have: at least this large, of this kind (rotational: hdd)."""

    min_size_gib: float | None = Field(default=None, gt=0, alias="minSizeGiB")
    type: DiskType | None = None


class MachineSelector(SpecModel):
    """Which pool machines may fill a claim: every field given must hold."""

    labels: dict[str, str] = Field(default_factory=dict, description="labels the machine "
                                   "carries (set at approval or by `machines label`)")
    min_cpus: int | None = Field(default=None, ge=1, description="logical CPUs at least")
    min_memory_gib: float | None = Field(default=None, gt=0, alias="minMemoryGiB",
                                         description="memory at least, GiB")
    disk: DiskSelector | None = None
    interface: str | None = Field(default=None, min_length=1, description="a network "
                                  "interface of this name")

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        return checked(labels)

    def mismatches(self, labels: Mapping[str, str], facts: Mapping[str, Any]) -> list[str]:
        """What of this selector a machine with these labels and facts does not meet, each in
        a few words; empty when it matches."""
        found = []
        for key, value in sorted(self.labels.items()):
            if labels.get(key) != value:
                found.append(f"label {key}={value}")
        if self.min_cpus is not None and (cpus(facts) or 0) < self.min_cpus:
            found.append(f">= {self.min_cpus} CPUs")
        if self.min_memory_gib is not None and (memory_gib(facts) or 0) < self.min_memory_gib:
            found.append(f">= {self.min_memory_gib:g} GiB memory")
        if self.disk is not None and not any(self._disk_fits(d) for d in disks(facts)):
            found.append(self._disk_text())
        if self.interface is not None and self.interface not in interfaces(facts):
            found.append(f"interface {self.interface}")
        return found

    def text(self) -> str:
        """The selector as the status says what a claim needs: 'label rack=a, >= 64 GiB
        memory'; 'any machine' when it asks nothing."""
        asked = self.mismatches({}, {})  # everything asked is missing from nothing
        return ", ".join(asked) if asked else "any machine"

    def _disk_fits(self, disk: Mapping[str, Any]) -> bool:
        wanted = self.disk
        assert wanted is not None
        size = disk.get("size_bytes")
        if wanted.min_size_gib is not None and (
                not isinstance(size, int) or size < wanted.min_size_gib * GIB):
            return False
        return wanted.type is None or ("hdd" if disk.get("rotational") else "ssd") == wanted.type

    def _disk_text(self) -> str:
        assert self.disk is not None
        size = [f">= {self.disk.min_size_gib:g} GiB"] if self.disk.min_size_gib else []
        return " ".join(["a", *size, *([self.disk.type] if self.disk.type else []), "disk"])


class RoleClaim(SpecModel):
    count: int = Field(ge=0, le=10000, description="how many machines of this role the "
                       "cluster holds from the pool")
    selector: MachineSelector = Field(default_factory=MachineSelector)


class PoolClaims(SpecModel):
    """`pool:` of a cluster spec: the managers and workers it claims from the pool."""

    managers: RoleClaim | None = None
    workers: RoleClaim | None = None


def cpus(facts: Mapping[str, Any]) -> int | None:
    """Logical CPUs, as the agent's facts report them."""
    value = (facts.get("cpu") or {}).get("logical")
    return value if isinstance(value, int) else None


def memory_gib(facts: Mapping[str, Any]) -> float | None:
    value = (facts.get("memory") or {}).get("total_bytes")
    return value / GIB if isinstance(value, int | float) else None


def disks(facts: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = facts.get("block_devices")
    return [d for d in found if isinstance(d, Mapping)] if isinstance(found, list) else []


def interfaces(facts: Mapping[str, Any]) -> set[str]:
    found = facts.get("interfaces")
    return {i.get("name") for i in found if isinstance(i, Mapping)} \
        if isinstance(found, list) else set()
