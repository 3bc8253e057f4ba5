"""Wire types shared by the agent and the coordinator: one definition, validated on both ends.

The precheck report printed by `nodeagent precheck --output json` is the same document
the agent sends at registration; its JSON Schema is kept in docs/precheck-report.schema.json.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from nodeagent.wire.contract import MAX_KUBECONFIG_BYTES, Phase, Role
from nodeagent.wire.redact import redact

PRECHECK_SCHEMA = "nodeagent.precheck/v1"
MAX_FACTS_BYTES = 64 * 1024  # what a node says about itself, as JSON: real ones take a few KiB
MAX_CHECK_DATA_BYTES = 16 * 1024
MAX_CHECKS = 256
MAX_TEXT = 4096  # a check's message or remedy
MAX_HOSTNAME = 253
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _hostname(value: str) -> str:
    """A host name as RFC 1123 has it: it reaches file names, templates, terminals and
    Kubernetes, so nothing else (no control characters, spaces, `${` or 10 KB names)."""
    if len(value) > MAX_HOSTNAME or not all(_LABEL.fullmatch(label)
                                            for label in value.split(".")):
        raise ValueError(f"{_quoted(value)} is not a host name: labels of letters, digits and "
                         f"'-' (not first or last), 1 to 63 characters each, separated by "
                         f"dots, {MAX_HOSTNAME} in all (rename the node: hostnamectl "
                         "set-hostname NAME)")
    return value


def _quoted(value: str, limit: int = 64) -> str:
    """value as an error may echo it: quoted with its control characters escaped (it reaches
    terminals and logs), cut to limit characters with its length said."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def _address(value: str) -> str:
    """An IPv4 or IPv6 address, nothing around it: it is rendered into other nodes' files."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{_quoted(value)} is not an IP address") from None
    return value


def _json_bounded(limit: int) -> AfterValidator:
    """At most limit bytes once serialized as JSON: free-form data a node sends is stored,
    shown and sent again, so its size is bounded where it is received."""
    def bounded(value: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(value, default=str)) > limit:
            raise ValueError(f"more than {limit} bytes as JSON")
        return value
    return AfterValidator(bounded)


# The lengths are the validators' to check, so that the refusal of a long value quotes it too.
HostName = Annotated[str, Field(json_schema_extra={"maxLength": MAX_HOSTNAME}),
                     AfterValidator(_hostname)]
IPAddress = Annotated[str, Field(json_schema_extra={"maxLength": 45}), AfterValidator(_address)]


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class Severity(StrEnum):
    HARD = "hard"  # a failure stops the node from joining
    SOFT = "soft"  # reported as a warning, as kubeadm warns


class Stage(StrEnum):
    """When a check gates a machine: its host checks before approval; the Kubernetes
    prerequisites its cluster's prepare items establish (forwarding, bridge netfilter, swap,
    the container runtime) after Prepare, before Deploy, as kubeadm checks them right before
    init and join."""

    HOST = "host"
    PREPARE = "prepare"


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckResult(_Wire):
    name: str = Field(max_length=128)
    severity: Severity
    status: Status
    message: str = Field(max_length=MAX_TEXT)
    remedy: str = Field(default="", max_length=MAX_TEXT)
    data: Annotated[dict[str, Any], _json_bounded(MAX_CHECK_DATA_BYTES)] = Field(
        default_factory=dict)
    duration: float = Field(description="seconds the check took")
    ignored: bool = Field(
        default=False, description="a failure turned into a warning by --ignore"
    )
    stage: Stage = Field(default=Stage.HOST, description="host: gates approval; prepare: a "
                         "Kubernetes prerequisite the cluster's prepare items set, which gates "
                         "Deploy")
    deferred: bool = Field(default=False, description="a prerequisite failing before Prepare: "
                           "to be set by Prepare, a warning until the run after it")


class Summary(_Wire):
    passed: int = 0
    warned: int = 0
    failed: int = 0
    skipped: int = 0


class PrecheckReport(_Wire):
    schema_: Literal["nodeagent.precheck/v1"] = Field(default=PRECHECK_SCHEMA, alias="schema")
    hostname: str = Field(max_length=MAX_HOSTNAME)
    role: Role
    started_at: float = Field(description="unix time the run started")
    duration: float = Field(description="wall-clock seconds of the whole run")
    ok: bool = Field(description="true when no hard check failed")
    prepared: bool | None = Field(default=None, description="true: run after the cluster's "
                                  "prepare items (--prepared), its prerequisites hard; false: "
                                  "before, their failures deferred; absent: an agent that "
                                  "checks only before approval")
    summary: Summary
    checks: list[CheckResult] = Field(max_length=MAX_CHECKS)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)


def precheck_json_schema() -> dict[str, Any]:
    """The documented schema of the precheck report (docs/precheck-report.schema.json)."""
    schema = PrecheckReport.model_json_schema(by_alias=True, mode="serialization")
    schema["$id"] = PRECHECK_SCHEMA
    return schema


# --- StateItems: what the coordinator asks an agent to apply -------------------------

# postdeploy: the cluster-level step one Ready manager runs once managers and workers are up.


class SpecModel(BaseModel):
    """User-written spec sections: camelCase keys, unknown keys rejected."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


AbsolutePath = Annotated[str, Field(pattern=r"^/", description="an absolute path")]
FileMode = Annotated[str, Field(pattern=r"^0?[0-7]{3}$", description="octal, e.g. 0644")]


# Where a text is within a document: keys (as written) and list indexes, e.g. ("argv", 1).
Location = tuple[str | int, ...]


class _Action(SpecModel):
    """What an item does. templated() lists the texts the agent substitutes ${...} in
    (items/exec.py, items/file.py), each with where it is in the action: what the
    coordinator checks a spec's placeholders in before it stores the spec."""

    def templated(self) -> list[tuple[Location, str]]:
        return []


def _arguments(argv: list[str]) -> list[tuple[Location, str]]:
    return [(("argv", index), arg) for index, arg in enumerate(argv)]


class ExecAction(_Action):
    """Runs argv directly (never through a shell); each argument may use ${templates}."""

    type: Literal["exec"]
    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    expected_exit_codes: list[int] = Field(default_factory=lambda: [0], min_length=1)
    cwd: str | None = None

    def templated(self) -> list[tuple[Location, str]]:
        """Each argument, each environment value and the working directory."""
        return [*_arguments(self.argv),
                *((("env", name), value) for name, value in self.env.items()),
                *([(("cwd",), self.cwd)] if self.cwd is not None else [])]


class FileAction(_Action):
    """Writes a file atomically; `template` is content with ${cluster.name}-style values."""

    type: Literal["file"]
    path: AbsolutePath
    content: str | None = None
    template: str | None = None
    mode: FileMode = "0644"
    owner: str | None = None  # user or user:group

    def templated(self) -> list[tuple[Location, str]]:
        """The template; content is written as it is."""
        return [(("template",), self.template)] if self.template is not None else []

    @model_validator(mode="after")
    def _one_source(self) -> FileAction:
        if (self.content is None) == (self.template is None):
            raise ValueError("exactly one of content or template is required")
        return self


class DownloadAction(_Action):
    """Fetches an artifact (from the coordinator's store) or a URL, verified by sha256."""

    type: Literal["download"]
    artifact: str | None = None
    url: str | None = None
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    path: AbsolutePath
    mode: FileMode = "0644"

    @model_validator(mode="after")
    def _one_source(self) -> DownloadAction:
        if (self.artifact is None) == (self.url is None):
            raise ValueError("exactly one of artifact or url is required")
        return self


class VersionAction(_Action):
    """Runs argv (as exec does) and succeeds only when the last line it prints is `expect`:
    the check the coordinator derives from a post-deploy item's versionCommand."""

    type: Literal["version"]
    argv: list[str] = Field(min_length=1)
    expect: str = Field(min_length=1)

    def templated(self) -> list[tuple[Location, str]]:
        """Each argument, as exec's."""
        return _arguments(self.argv)


def installed_version(output: str) -> str:
    """What a version command says is installed: the last non-empty line of its output."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else ""


Action = Annotated[ExecAction | FileAction | DownloadAction | VersionAction,
                   Field(discriminator="type")]


# The name of an output, as templates name it (${outputs.ITEM.NAME}) and as the line an item
# prints to produce it starts (NAME=value).
OUTPUT_NAME = r"^[A-Za-z][A-Za-z0-9_]*$"
MAX_OUTPUT_BYTES = 16 * 1024
MAX_OUTPUTS = 64  # per item
DEFAULT_MINT_LIFETIME = 900.0
# The phases whose items may upload an etcd snapshot: a manager's upgrade, and the leave job a
# remaining manager runs before a manager's removal.
SNAPSHOT_PHASES = ("upgrade", "leave")


class ItemOutput(SpecModel):
    """A value an item produces for later items (any machine's, as ${outputs.ITEM.NAME}): by
    default the last line `NAME=value` the item prints; with `file`, what it leaves in that
    file (one trailing newline removed). Secret unless declared otherwise: encrypted at rest,
    masked wherever output is shown, handed only to machines whose items use it."""

    name: str = Field(pattern=OUTPUT_NAME)
    file: AbsolutePath | None = Field(default=None, description="read from this file once the "
                                      "item succeeded, instead of from a NAME=value line")
    secret: bool = True


class ItemCondition(SpecModel):
    """Which machines of its role an item runs on; every condition given must hold."""

    labels: dict[str, str] = Field(default_factory=dict, description="the machine has each "
                                   "of these labels with this value")
    first_manager: bool | None = Field(
        default=None, description="true: only the first manager (${managers.first}, the one "
        "that starts the control plane); false: every other machine of the role")
    first_upgrader: bool | None = Field(
        default=None, description="upgrade items: true: only the manager that upgrades first in "
        "a release (whichever it is: `kubeadm upgrade apply`); false: every other machine of "
        "the role")

    def identity(self) -> dict[str, Any]:
        """What an item's fingerprint holds of the condition: firstUpgrader only when set, so
        that conditions written before it existed keep their fingerprints."""
        found = self.model_dump(mode="json", exclude={"first_upgrader"})
        if self.first_upgrader is not None:
            found["first_upgrader"] = self.first_upgrader
        return found


class StateItem(SpecModel):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    phase: Phase
    action: Action
    version: str = "1"
    timeout: float = Field(default=600, gt=0)
    kubeconfig_from: AbsolutePath | None = Field(
        default=None, description="a file the item leaves a kubeconfig in (e.g. "
        "/etc/kubernetes/admin.conf): once the item succeeded the agent sends it to the "
        "coordinator, which drains through it when settings.kubernetes.kubeconfig is not set; "
        "manager items only")
    etcd_snapshot_from: AbsolutePath | None = Field(
        default=None, description="a file the item leaves an etcd snapshot in (`etcdctl "
        "snapshot save`): once the item succeeded the agent uploads it to the coordinator, "
        "which keeps it sealed (settings.etcdSnapshots); the item succeeds only once it is "
        "kept. Manager items of the upgrade and leave phases only")
    version_command: list[str] | None = Field(
        default=None, min_length=1, description="postdeploy items: argv printing the installed "
        "version (its last line), which must equal `version`; checked after the item ran and "
        "again after every upgrade")
    outputs: list[ItemOutput] = Field(
        default_factory=list, description="values the item produces for later items, as "
        "${outputs.ITEM.NAME}; manager items only")
    lifetime_seconds: float | None = Field(
        default=None, gt=0, description="mint items: how long the material they mint may be "
        f"used before it is minted again (default {DEFAULT_MINT_LIFETIME:g})")
    when: ItemCondition | None = Field(
        default=None, description="run only on the machines of the role that match")

    @model_validator(mode="after")
    def _version_command_on_postdeploy(self) -> StateItem:
        if self.version_command is not None and self.phase != "postdeploy":
            raise ValueError("versionCommand: only postdeploy items have their installed "
                             f"version checked, not {self.phase} items")
        if self.etcd_snapshot_from is not None and self.phase not in SNAPSHOT_PHASES:
            raise ValueError(f"etcdSnapshotFrom: only {' and '.join(SNAPSHOT_PHASES)} items "
                             f"upload an etcd snapshot (before a control-plane step), not "
                             f"{self.phase} items")
        if self.lifetime_seconds is not None and self.phase != "mint":
            raise ValueError(f"lifetimeSeconds: only mint items have one, not {self.phase} items")
        names = [output.name for output in self.outputs]
        if len(set(names)) != len(names):
            raise ValueError(f"outputs: a name appears twice ({', '.join(names)})")
        return self

    @property
    def lifetime(self) -> float:
        return self.lifetime_seconds or DEFAULT_MINT_LIFETIME

    def fingerprint(self) -> str:
        """Identity of what the item does: a changed version or action means it runs again.
        kubeconfigFrom, etcdSnapshotFrom, versionCommand, outputs and when count only when set, so that items
        written before they existed keep their fingerprints."""
        identity: dict[str, Any] = {"name": self.name, "version": self.version,
                                    "action": self.action.model_dump(mode="json")}
        if self.kubeconfig_from is not None:
            identity["kubeconfigFrom"] = self.kubeconfig_from
        if self.etcd_snapshot_from is not None:
            identity["etcdSnapshotFrom"] = self.etcd_snapshot_from
        if self.version_command is not None:
            identity["versionCommand"] = self.version_command
        if self.outputs:
            identity["outputs"] = [o.model_dump(mode="json") for o in self.outputs]
        if self.when is not None:
            identity["when"] = self.when.identity()
        body = json.dumps(identity, sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:32]


class ProxySettings(SpecModel):
    """HTTP proxies for what a node fetches. The same section in the agent's config file and
    in a cluster's settings; the node's own wins field by field (see over())."""

    http: str | None = None
    https: str | None = None
    no_proxy: list[str] = Field(default_factory=list)

    def over(self, fallback: ProxySettings) -> ProxySettings:
        """These settings, with what they leave unset taken from fallback."""
        return ProxySettings(http=self.http or fallback.http, https=self.https or fallback.https,
                             no_proxy=[*self.no_proxy, *fallback.no_proxy])


def split_host_port(server: str, default_port: int) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]:port` or bare IPv6 -> (host, port)."""
    text = server.strip()
    if not text:
        raise ValueError("empty server address")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":") if rest else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError(f"{server!r}: no host name or address")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{server!r}: port must be a number from 1 to 65535")
    return host, int(port_text)


def _ntp_server(value: str) -> str:
    split_host_port(value, 123)
    return value


# Validated one by one so that a bad entry is reported as ntp.servers[N] on its own line.
NtpServer = Annotated[str, AfterValidator(_ntp_server)]


class NtpSettings(SpecModel):
    """The time sources a cluster's nodes must agree with, and how far off they may be."""

    servers: list[NtpServer] = Field(default_factory=list)
    max_skew_seconds: float = Field(default=2.0, gt=0)


class RetryPolicy(SpecModel):
    """Capped exponential backoff with jitter; maxAttempts None retries forever."""

    base_seconds: float = Field(default=1.0, gt=0)
    max_seconds: float = Field(default=60.0, gt=0)
    max_attempts: int | None = Field(default=None, ge=1)


# --- agent <-> coordinator messages ---------------------------------------------------

MIN_CREDENTIAL_DISTINCT = 16  # characters: a random token of 32 has about 25


def _credential(value: str) -> str:
    """A credential an agent chose: printable, without spaces, and not guessable at a glance
    (`"a"*32` is refused); the agent's own are 43 random URL-safe characters."""
    if not value.isascii() or not value.isprintable() or " " in value:
        raise ValueError("only printable ASCII characters without spaces")
    if len(set(value)) < MIN_CREDENTIAL_DISTINCT:
        raise ValueError(f"too guessable: fewer than {MIN_CREDENTIAL_DISTINCT} different "
                         "characters")
    return value


NewCredential = Annotated[str, Field(min_length=32, max_length=256),
                          AfterValidator(_credential)]


class RegisterRequest(_Wire):
    join_token: str = Field(max_length=256)
    hostname: HostName
    ip: IPAddress | None
    facts: Annotated[dict[str, Any], _json_bounded(MAX_FACTS_BYTES)] = Field(
        default_factory=dict)
    precheck: PrecheckReport
    credential: NewCredential | None = Field(
        default=None,
        description="the machine's credential, chosen and saved by the agent before its first "
                    "attempt: a retry carrying it gets the machine that attempt registered, "
                    "without using the join token again (None: the coordinator chooses one)")


class RegisterResponse(_Wire):
    machine_id: str
    credential: str = Field(description="per-machine bearer token for every later request")
    credential_expires_at: float | None = Field(
        default=None, description="unix time; the agent rotates the credential before it")


class KubeconfigRefresh(_Wire):
    """The file of an applied kubeconfigFrom item, sent again because it changed on disk."""

    item: str = Field(max_length=253, description="the item's name")
    fingerprint: str = Field(max_length=64, description="the version of it the machine applied")
    kubeconfig: str = Field(max_length=MAX_KUBECONFIG_BYTES, description="the file as it is "
                            "now: in this field only, never in output or logs")


class RotateRequest(_Wire):
    credential: NewCredential = Field(description="the new credential, chosen and saved by "
                                      "the agent")


class RotateResponse(_Wire):
    credential_expires_at: float | None


class MoveTarget(_Wire):
    """The coordinator this machine's agent is to move to (a pivot): it checks the target's CA
    against ca_pin and that the target knows its credential before it switches (docs/agent.md,
    "Following the coordinator")."""

    urls: list[str] = Field(min_length=1, description="the target's URL, then its other "
                            "replicas (https only)")
    ca_pin: str | None = Field(default=None, description="sha256:<hex> of the target's CA "
                               "certificate (DER), as a join string pins it. The agent moves "
                               "only to a target whose URLs are all https and pinned (one an "
                               "older coordinator stored without a pin is refused)")
    since: float = Field(description="when the target was set (unix time)")


class Assignment(_Wire):
    """What a machine must do now. `generation` grows on every change the agent must see."""

    machine_id: str
    generation: int
    state: str
    phase: Phase | None = Field(description="the phase whose items to run; None: nothing to do")
    items: list[StateItem] = Field(default_factory=list)
    applied: list[str] = Field(
        default_factory=list, description="fingerprints the coordinator counts as applied: "
        "those reported, and the upgrade items of the release the machine is at (its baseline)"
    )
    values: dict[str, str] = Field(
        default_factory=dict, description="template values: cluster.name, machine.ip, ..."
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    proxy: ProxySettings = Field(default_factory=ProxySettings,
                                 description="the cluster's proxies, for downloads from URLs")
    ntp: NtpSettings = Field(default_factory=NtpSettings,
                             description="the cluster's time sources, for the clock check")
    remove: bool = Field(default=False, description="the machine was deleted: stop and forget")
    retries: int = Field(
        default=0, ge=0, description="how many times the operator had the machine's given-up "
        "item run again (`coordinator machines retry`): a new count starts the phase again, the "
        "item with a fresh attempt budget")
    secrets: list[str] = Field(
        default_factory=list, description="the names of the values that are secret (outputs "
        "and join material): the agent masks their values wherever it shows or reports output")
    move_target: MoveTarget | None = Field(
        default=None, description="the coordinator to move to (`PUT /v1/move-target`), "
        "the same for every machine; None: stay")
    incarnation: int = Field(
        default=0, ge=0, description="how many times the machine went back to the pool, reset: "
        "the agent's journal is of one incarnation, so a machine claimed again runs every item")

    @property
    def journal_owner(self) -> str:
        """Whose items the agent's journal records: this machine in this incarnation."""
        return self.machine_id if not self.incarnation else f"{self.machine_id}.{self.incarnation}"


class ItemReport(_Wire):
    item: str = Field(max_length=253, description="the item's name, as its assignment has it")
    fingerprint: str = Field(max_length=64)
    phase: Phase
    status: Literal["running", "succeeded", "failed"]
    attempt: int = Field(ge=1)
    started_at: float
    finished_at: float | None = None
    exit_code: int | None = None
    output: str = Field(default="", max_length=16384, description="the last 4 KiB of output")
    error: str = Field(default="", max_length=16384)
    next_retry_at: float | None = None
    gave_up: bool = Field(
        default=False, description="a failed report's: the item failed retry.maxAttempts "
        "times and the agent stopped retrying it (and the items after it) until the assignment "
        "changes: a retry ordered by the operator, other items, or the agent restarted")
    kubeconfig: str | None = Field(
        default=None, max_length=MAX_KUBECONFIG_BYTES,
        description="the file named by the item's kubeconfigFrom, read once it succeeded: in "
        "this field only, never in output, error or logs")
    outputs: dict[str, str] | None = Field(
        default=None, max_length=MAX_OUTPUTS,
        description="the item's declared outputs (name: value), once it "
        "succeeded: in this field only; their values are masked in output, error and logs")

    @field_validator("outputs")
    @classmethod
    def _bounded(cls, outputs: dict[str, str] | None) -> dict[str, str] | None:
        for name, value in (outputs or {}).items():
            if len(value.encode()) > MAX_OUTPUT_BYTES:
                raise ValueError(f"output {name}: more than {MAX_OUTPUT_BYTES} bytes")
        return outputs

    @model_validator(mode="after")
    def _gave_up_on_a_failure(self) -> ItemReport:
        if self.gave_up and self.status != "failed":
            raise ValueError(f"gave_up: only a failed report gives up, not a {self.status} one")
        return self

    @field_validator("output", "error")
    @classmethod
    def _no_secrets(cls, text: str) -> str:
        """Item output reaches events, status and the dashboard: secrets never do."""
        return redact(text)
