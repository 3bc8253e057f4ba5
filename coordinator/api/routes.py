"""The one route table: every path, its handler, who may call it and what it takes and gives.
The aiohttp routes, the authentication of each request and /openapi.json all come from it."""

from __future__ import annotations

from coordinator.api import admin, agent, backups, pivots, public, streams
from coordinator.api.bodies import (
    AdminTokenBody,
    ApproveBody,
    JoinTokenBody,
    LabelsBody,
    MoveTargetBody,
    PivotBody,
    ReissueBody,
    RoleBody,
)
from coordinator.api.routing import Route
from coordinator.api.streams import MAX_EVENT_PAGE
from coordinator.domain.model import ClusterSpec
from coordinator.domain.views.machinelist import MAX_LIMIT, ROLES, SORT_FIELDS
from nodeagent.wire.protocol import (
    Assignment,
    ItemReport,
    KubeconfigRefresh,
    MoveTarget,
    PrecheckReport,
    RegisterRequest,
    RegisterResponse,
    RotateRequest,
    RotateResponse,
)

TEXT, NUMBER = {"type": "string"}, {"type": "number"}
EVENT_QUERY = (("cluster", TEXT), ("machine", TEXT), ("kind", TEXT), ("since", NUMBER),
               ("after_id", {"type": "integer", "minimum": 0}),
               ("limit", {"type": "integer", "minimum": 1, "maximum": MAX_EVENT_PAGE}),
               ("order", {"enum": ["asc", "desc"]}))
SORTS = [f"{sign}{name}" for name in SORT_FIELDS for sign in ("", "-")]
MACHINE_QUERY = (("cluster", TEXT), ("pool", {"enum": ["true", "false"]}), ("state", TEXT),
                 ("role", {"enum": list(ROLES)}),
                 ("label", {"type": "array", "items": TEXT}), ("q", TEXT),
                 ("responding", {"enum": ["true", "false"]}),
                 ("id", {"type": "array", "items": TEXT}), ("sort", {"enum": SORTS}),
                 ("limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
                 ("offset", {"type": "integer", "minimum": 0}))

ROUTES: tuple[Route, ...] = (
    Route("GET", "/healthz", public.healthz, "Liveness", "open"),
    Route("GET", "/readyz", public.readyz, "Readiness: the store answers", "open"),
    Route("GET", "/openapi.json", public.openapi, "This document", "open"),
    Route("GET", "/v1/ca.crt", public.ca_certificate,
          "The CA certificate (PEM) agents check against their join string's hash", "open"),
    Route("POST", "/v1/agent/register", agent.register, "Register a machine with a join token "
          "(also in the Authorization header: checked before the body is read)",
          "open", 201, body=RegisterRequest, answer=RegisterResponse),
    Route("GET", "/v1/agent/machines/{machine_id}/assignment", agent.assignment,
          "Long-poll the machine's assignment (query: after=generation, wait=seconds; 304 when "
          "If-None-Match is the assignment's ETag, W/\"EPOCH-GENERATION\", and the wait ran out "
          "with nothing new; at once when it names another epoch or a later generation). "
          "Each poll counts as the machine's heartbeat: the answer says so with "
          "Nodeagent-Heartbeat: poll", "machine",
          answer=Assignment),
    Route("POST", "/v1/agent/machines/{machine_id}/reports", agent.report,
          "Report an item's progress", "machine", body=ItemReport),
    Route("POST", "/v1/agent/machines/{machine_id}/heartbeat", agent.heartbeat, "Heartbeat",
          "machine"),
    Route("POST", "/v1/agent/machines/{machine_id}/precheck", agent.precheck,
          "Replace a Pending machine's precheck report (the agent re-ran its prechecks), or a "
          "prepared machine's (its prechecks after Prepare, the gate into Deploy)",
          "machine", body=PrecheckReport),
    Route("POST", "/v1/agent/machines/{machine_id}/kubeconfig", agent.refresh_kubeconfig,
          "Send again the file of an applied kubeconfigFrom item, which changed on disk (taken "
          "unless unusable or older than the one held)", "machine", body=KubeconfigRefresh),
    Route("POST", "/v1/agent/machines/{machine_id}/credential", agent.rotate_credential,
          "Rotate the machine's credential to one the agent chose", "machine",
          body=RotateRequest, answer=RotateResponse),
    Route("GET", "/v1/artifacts/{name}", agent.artifact, "Download an artifact", "machine"),
    Route("GET", "/v1/clusters", admin.list_clusters, "List clusters", "admin"),
    Route("PUT", "/v1/clusters", admin.apply_cluster, "Apply a cluster spec (YAML or JSON body); "
          "a Kubernetes version its rules refuse (one minor at a time, a new release, no "
          "downgrade unless allowDowngrade=true) is refused 422", "admin", body=ClusterSpec,
          query=(("allowDowngrade", {"type": "boolean"}),)),
    Route("GET", "/v1/clusters/{name}", admin.get_cluster, "Get a cluster", "admin"),
    Route("DELETE", "/v1/clusters/{name}", admin.delete_cluster,
          "Delete a cluster: every machine resets first", "admin", 202),
    Route("GET", "/v1/clusters/{name}/status", admin.cluster_status,
          "Machine states and item progress (query: machines=false leaves their views out)",
          "admin"),
    Route("POST", "/v1/clusters/{name}/join-tokens", admin.create_join_token,
          "Create a join token and its join string (shown once)", "admin", 201,
          body=JoinTokenBody, body_optional=True),
    Route("GET", "/v1/clusters/{name}/join-tokens", admin.list_join_tokens,
          "List a cluster's join tokens", "admin"),
    Route("POST", "/v1/pool/join-tokens", admin.create_join_token,
          "Create a join token into the machine pool and its join string (shown once); "
          "autoApprove: its machines are approved once their prechecks pass", "admin", 201,
          body=JoinTokenBody, body_optional=True),
    Route("GET", "/v1/pool/join-tokens", admin.list_pool_join_tokens,
          "List the pool's join tokens", "admin"),
    Route("GET", "/v1/join-tokens", admin.list_join_tokens, "List every join token", "admin"),
    Route("DELETE", "/v1/join-tokens/{id}", admin.revoke_join_token, "Revoke a join token",
          "admin"),
    Route("GET", "/v1/admin-tokens", admin.list_admin_tokens, "List admin API tokens", "admin"),
    Route("POST", "/v1/admin-tokens", admin.create_admin_token,
          "Create an admin API token (admin or read-only; shown once)", "admin", 201,
          body=AdminTokenBody),
    Route("DELETE", "/v1/admin-tokens/{id}", admin.revoke_admin_token,
          "Revoke an admin API token", "admin"),
    Route("POST", "/v1/backup", backups.backup,
          "A consistent snapshot of the coordinator's whole state (clusters, machines, tokens as "
          "hashes, sealed outputs, events, the PKI and the secrets key) as one archive "
          "(application/gzip): admin tokens only, audited", "admin"),
    Route("PUT", "/v1/agent/machines/{machine_id}/etcd-snapshots/{item}", agent.etcd_snapshot,
          "Upload the etcd snapshot a manager's item left (its etcdSnapshotFrom): the body "
          "(application/octet-stream, with Content-Length and Content-Digest: sha-256=:BASE64:), "
          "kept sealed once its checksum holds (413 beyond settings.etcdSnapshots.maxSizeMiB; "
          "409 when the machine does not run that item's phase; 429 when too many arrive)",
          "machine", 201),
    Route("GET", "/v1/clusters/{name}/etcd-snapshots", admin.list_etcd_snapshots,
          "The etcd snapshots the coordinator keeps of the cluster, newest first (never their "
          "bytes)", "admin"),
    Route("POST", "/v1/clusters/{name}/etcd-snapshots/{id}/download",
          admin.download_etcd_snapshot,
          "An etcd snapshot's bytes (application/octet-stream, its SHA-256 in Content-Digest): "
          "they hold every Secret of the cluster, so admin tokens only, audited", "admin",
          hands_out=True),
    Route("GET", "/v1/whoami", admin.whoami,
          "The admin token's name and role: the dashboard offers its actions to admin tokens "
          "only", "admin"),
    Route("GET", "/v1/machines", admin.list_machines,
          "A page of the machines, filtered and sorted: {machines, total, offset, limit} "
          "(pool=true: the pool's; state: comma-separated; label: k=v or k, repeatable; q: in "
          "hostname or IP; id: repeatable; sort: a field, - first for descending)", "admin",
          query=MACHINE_QUERY),
    Route("GET", "/v1/machines/{ref}", admin.get_machine, "Get a machine by id or hostname",
          "admin"),
    Route("DELETE", "/v1/machines/{ref}", admin.delete_machine,
          "Delete a machine: drain, reset items, Node deletion, then the record (query: "
          "skipReset=true removes the record at once; force=true deletes a manager the quorum "
          "guard refuses, 409 otherwise)", "admin", 202),
    Route("POST", "/v1/machines/{ref}/approve", admin.approve,
          "Approve a Pending machine, optionally with a role, labels and its cluster address "
          "(an interface or address its node reported)", "admin", body=ApproveBody,
          body_optional=True),
    Route("PATCH", "/v1/machines/{ref}/labels", admin.label,
          "Set and remove a machine's labels; its assignment is made again", "admin",
          body=LabelsBody),
    Route("PUT", "/v1/machines/{ref}/role", admin.set_role, "Set a Pending machine's role",
          "admin", body=RoleBody),
    Route("GET", "/v1/clusters/{name}/upgrade-plan", admin.upgrade_plan,
          "Dry run: the order and batches of the upgrade the stored spec would take, and the "
          "items each machine runs", "admin"),
    Route("POST", "/v1/clusters/{name}/upgrade-plan", admin.upgrade_plan,
          "Dry run of a new spec (the body, YAML or JSON; none: the stored spec): the order and "
          "batches of the upgrade its apply would start, and the items each machine runs; "
          "changes nothing, so read-only tokens may send it", "admin", body=ClusterSpec,
          body_optional=True, dry_run=True, query=(("allowDowngrade", {"type": "boolean"}),)),
    Route("GET", "/v1/clusters/{name}/render", admin.render,
          "What each machine would run: per machine and phase, each item's action with its "
          "values filled in, secrets masked (query: machine (id or hostname), phase, fleet="
          "MANAGERS,WORKERS for a hypothetical fleet instead of the cluster's machines)",
          "admin"),
    Route("POST", "/v1/clusters/{name}/render", admin.render,
          "What each machine would run under a new spec (the body, YAML or JSON), which need "
          "not be stored yet (no machines: a hypothetical fleet); the query of GET; changes "
          "nothing, so read-only tokens may send it", "admin", body=ClusterSpec,
          body_optional=True, dry_run=True),
    Route("GET", "/v1/clusters/{name}/remediation", admin.remediation_plan,
          "Dry run of the cluster's health policy (settings.health): its unhealthy machines, "
          "since when and why, which it would replace now and what holds it back", "admin"),
    Route("POST", "/v1/clusters/{name}/provision", admin.provision,
          "Provision a cluster held by settings.provision.held: its approved and claimed "
          "machines start (provisioned: false when it was not held)", "admin"),
    Route("POST", "/v1/clusters/{name}/upgrade/{verb}", admin.pause,
          "verb pause: no machine starts upgrading (running ones finish); verb resume", "admin"),
    Route("POST", "/v1/machines/{ref}/drain/{action}", admin.drain_action,
          "A machine's drain (an upgrade's or a removal's): action retry (new attempt and "
          "timeout), skip (upgrade or reset with the pods left) or force (delete pods their "
          "budgets protect)", "admin"),
    Route("GET", "/v1/removed-machines", admin.removed_machines,
          "Deleted machines whose history is kept, by id or hostname (query: ref, cluster), the "
          "last removed first", "admin", query=(("ref", TEXT), ("cluster", TEXT))),
    Route("POST", "/v1/machines/{ref}/retry", admin.retry_items,
          "Run again the item the machine's agent gave up on (retry.maxAttempts), with a fresh "
          "attempt budget; 409 when none was given up", "admin"),
    Route("POST", "/v1/machines/{ref}/revoke", admin.revoke_machine_credential,
          "Revoke a machine's credential", "admin"),
    Route("POST", "/v1/machines/{ref}/reissue", admin.reissue_machine_credential,
          "Revoke a machine's credential and issue a one-use join string bound to it (shown "
          "once; its agent registers with it to get a new credential for the same record)",
          "admin", 201, body=ReissueBody, body_optional=True),
    Route("GET", "/v1/move-target", admin.get_move_target,
          "The coordinator every agent is told to move to (null: none)", "admin"),
    Route("PUT", "/v1/move-target", admin.set_move_target,
          "Tell every agent, through its assignment, to move to another coordinator (a pivot): "
          "each checks its CA against caPin and that it knows its credential, then switches",
          "admin", body=MoveTargetBody, answer=MoveTarget),
    Route("DELETE", "/v1/move-target", admin.clear_move_target,
          "Clear the move target (a pivot rolled back): agents stay, and those that moved come "
          "back once the target stops answering; answers the target cleared (null: none)",
          "admin"),
    Route("GET", "/v1/events", streams.events,
          "Event history (query: cluster, machine (id or hostname), kind (comma-separated), "
          "since (unix time), after_id, limit (1 to 1000), order=asc|desc)", "admin",
          query=EVENT_QUERY),
    Route("GET", "/v1/events/stream", streams.event_stream,
          "Server-sent events: new events as they are recorded (the filters of /v1/events; "
          "resumes after Last-Event-ID)", "admin"),
    Route("GET", "/v1/pivot", pivots.get_pivot, "The pivot this coordinator is in, if any "
          "(`coordinator pivot status`)", "admin"),
    Route("POST", "/v1/pivot", pivots.begin_pivot, "Begin a pivot to another coordinator, or "
          "resume the one under way to it (409 for another target)", "admin", body=PivotBody),
    Route("POST", "/v1/pivot/{id}/steps/{step}", pivots.record_step,
          "Record that the pivot reached a step (frozen, copied, announced, done); once frozen "
          "every other change is refused (409), once done for good", "admin"),
    Route("DELETE", "/v1/pivot/{id}", pivots.abort_pivot,
          "Roll back a pivot not done yet: changes are taken again", "admin"),
    Route("POST", "/v1/pivot/{id}/snapshot", pivots.pivot_snapshot,
          "The frozen coordinator's state as one archive, for the target", "admin"),
    Route("GET", "/v1/pivot/import", pivots.check_import,
          "On the target, before the old coordinator is frozen: whether it takes a pivot's "
          "state (200: it holds none, or already this pivot's; 409 saying why not)", "admin",
          query=(("pivot", TEXT), ("schema", TEXT))),
    Route("POST", "/v1/pivot/import", pivots.import_pivot,
          "On the target: import a pivot's archive (the body; query: pivot, from) into this "
          "coordinator, which must hold no state, or already hold this pivot's (200 either "
          "way)", "admin", query=(("pivot", TEXT), ("from", TEXT))),
    Route("GET", "/metrics", public.metrics,
          "Prometheus metrics (text format; with serve --metrics-token-file, its token)", "open"),
    Route("GET", "/", public.dashboard_root, "Redirects to the dashboard", "open", 302),
    Route("GET", "/ui/", public.dashboard_root, "Redirects to the dashboard", "open", 302),
    Route("GET", "/ui/{name}", public.dashboard,
          "The web dashboard's files (the page asks for the admin token)", "open"),
)
