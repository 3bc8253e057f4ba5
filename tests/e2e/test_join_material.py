"""What the first manager makes reaches the machines that need it, and no one else: real agents
in network namespaces, three managers and four workers. The first manager's init item
produces a CA hash; every other machine gets a token minted for it alone on a Ready manager
(managers also a certificate key, workers never), uses it once, and has it revoked; a worker
kept from joining past the token's lifetime gets a new one. Then every secret is looked for in
every API view (admin and read-only), the event history, every log and the database files:
it is nowhere but in the nodes that used it.

The "cluster" is a test double in shell: files under tmp_path/k8s stand for what kubeadm keeps
(tokens with their expiry, certificate keys, revocations); the items check them as kubeadm
join would (the token exists, is for this node, has not expired nor been revoked)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from coordinator.api.routes import ROUTES
from tests.support.rollout import SPEC, Fleet, all_ready, fleet

MANAGERS = ["m1", "m2", "m3"]
WORKERS = ["w1", "w2", "w3", "w4"]
LIFETIME = 6  # seconds a token may be used: w4 is kept from joining for longer


def cluster_spec(k8s: Path) -> str:
    """Init on the first manager; token and certificate-key minting, revocation; joins that
    check what they were given against the double's records."""
    check = (f'line=$(grep "^$1 " {k8s}/tokens) || {{ echo "unknown token"; exit 3; }}; '
             'set -- $line "$@"; '
             f'[ "$2" = "$HOST" ] || {{ echo "token minted for $2"; exit 4; }}; '
             f'[ "$(date +%s)" -lt "$3" ] || {{ echo "token expired"; exit 5; }}; '
             f'grep -qx "revoked $1" {k8s}/revoked 2>/dev/null && {{ echo "revoked"; exit 6; }}; '
             f'[ "$5" = "$(cat {k8s}/cahash)" ] || {{ echo "wrong CA hash"; exit 7; }}; ')
    worker_join = (f'[ -e gate ] || {{ echo "gate closed"; exit 8; }}; {check}'
                   f'echo "used $1 $HOST -" >> {k8s}/used')
    manager_join = (f'{check}grep -qx "$6 $HOST" {k8s}/keys || {{ echo "bad key"; exit 9; }}; '
                    f'echo "used $1 $HOST $6" >> {k8s}/used')
    return SPEC.format(types=f"""\
  manager:
    - name: init
      phase: deploy
      when: {{firstManager: true}}
      action:
        type: exec
        argv: [sh, -c, 'h=sha256:$$(od -An -N16 -tx1 /dev/urandom | tr -d " \\n");
                        echo "$$h" > {k8s}/cahash; echo "caCertHash=$$h"; echo "endpoint=$$1:6443"',
               sh, "${{machine.ip}}"]
      outputs: [{{name: caCertHash}}, {{name: endpoint, secret: false}}]
    - name: token
      phase: mint
      lifetimeSeconds: {LIFETIME}
      action:
        type: exec
        argv: [sh, -c, 't=$$(od -An -N8 -tx1 /dev/urandom | tr -d " \\n");
                        echo "$$t $$1 $$(( $$(date +%s) + $$2 ))" >> {k8s}/tokens; echo "token=$$t"',
               sh, "${{joiner.hostname}}", "${{mint.lifetimeSeconds}}"]
      outputs: [{{name: token}}]
    - name: certkey
      phase: mint
      action:
        type: exec
        argv: [sh, -c, 'k=$$(od -An -N32 -tx1 /dev/urandom | tr -d " \\n");
                        echo "$$k $$1" >> {k8s}/keys; echo "key=$$k"', sh, "${{joiner.hostname}}"]
      outputs: [{{name: key}}]
    - name: join
      phase: deploy
      when: {{firstManager: false}}
      action:
        type: exec
        env: {{HOST: "${{machine.hostname}}"}}
        argv: [sh, -c, '{manager_join}', sh, "${{outputs.token.token}}",
               "${{outputs.init.caCertHash}}", "${{outputs.certkey.key}}"]
    - name: forget-token
      phase: revoke
      action: {{type: exec, argv: [sh, -c, 'echo "revoked $$1" >> {k8s}/revoked', sh,
                                   "${{outputs.token.token}}"]}}
    - name: forget-key
      phase: revoke
      action: {{type: exec, argv: [sh, -c, 'echo "revoked-key $$1" >> {k8s}/revoked', sh,
                                   "${{outputs.certkey.key}}"]}}
  worker:
    - name: join
      phase: deploy
      action:
        type: exec
        env: {{HOST: "${{machine.hostname}}"}}
        argv: [sh, -c, '{worker_join}', sh, "${{outputs.token.token}}",
               "${{outputs.init.caCertHash}}"]
""")


def records(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_join_material_is_minted_per_joiner_used_once_revoked_and_never_shown(
        tmp_path: Path) -> None:
    k8s = tmp_path / "k8s"
    k8s.mkdir()
    with fleet(tmp_path, closed_gates=("w4",), managers=MANAGERS, workers=WORKERS,
               cluster_spec=cluster_spec(k8s)) as f:
        f.wait_for("w4's first token expired and a second minted", lambda: sum(
            host == "w4" for _, host, _ in records(k8s / "tokens")) >= 2, timeout=180)
        f.open_gate("w4")
        f.wait_for("all Ready", lambda: all_ready(f), timeout=180)
        f.wait_for("every used token revoked", lambda: {
            f"revoked {t}" for _, t, _, _ in records(k8s / "used")} <= {
            " ".join(r) for r in records(k8s / "revoked")}, timeout=60)
        events = f.events()
        status = f.admin_json("status", "lab")
        reader = f.admin("admin-token", "create", "viewer", "--role", "read-only").strip()
        ids = [m["id"] for m in f.admin_json("machines")]
        views = api_views(f, reader, ids)
        admin_views = api_views(f, f.coordinator.token_file.read_text().strip(), ids)

    tokens, used, revoked = records(k8s / "tokens"), records(k8s / "used"), records(k8s / "revoked")
    keys = records(k8s / "keys")
    # Each joiner used a token minted for it (the join checked that), each token once.
    assert sorted(host for _, _, host, _ in used) == ["m2", "m3", "w1", "w2", "w3", "w4"]
    assert len({token for _, token, _, _ in used}) == 6
    # Workers never got a certificate key: none was minted for them, their joins saw none. (A
    # manager whose token expired before its join, on a loaded machine, got a new key with
    # its new token: each manager joined with a key minted for it.)
    assert {host for _, host in keys} == {"m2", "m3"}
    assert all(key == "-" for _, _, host, key in used if host.startswith("w"))
    assert all((key, host) in {(k, h) for k, h in keys}
               for _, _, host, key in used if host.startswith("m"))
    # Every used token and key was revoked; w4's expired first token was never used.
    assert {f"revoked {t}" for _, t, _, _ in used} <= {" ".join(r) for r in revoked}
    assert {f"revoked-key {k}" for _, _, _, k in used if k != "-"} <= {" ".join(r) for r in revoked}
    w4_tokens = [t for t, host, _ in tokens if host == "w4"]
    assert len(w4_tokens) >= 2 and w4_tokens[0] not in {t for _, t, _, _ in used}
    assert any(e["kind"] == "join-material" and "expired before its items used it" in e["message"]
               and e["hostname"] == "w4" for e in events)
    minted = [e for e in events if e["kind"] == "join-material" and "minted on" in e["message"]]
    assert {e["hostname"] for e in minted} == {"m2", "m3", "w1", "w2", "w3", "w4"}

    # The secrets: every token, key and the CA hash. Nowhere a reader, an admin, the history,
    # a log or the database shows them.
    secrets = {t for t, _, _ in tokens} | {k for k, _ in keys} | {(k8s / "cahash").read_text().strip()}
    # The endpoint is declared `secret: false`: the status shows it.
    assert status["outputs"]["outputs.init.endpoint"].endswith(":6443")
    for where, text in [*views.items(), *admin_views.items(),
                        ("events", json.dumps(events)), *logs(tmp_path), *database(tmp_path)]:
        found = [s for s in secrets if s in text or s.removeprefix("sha256:") in text]
        assert not found, f"{where} shows {found}"


# Run in the coordinator's namespace (this process cannot reach it): each path's answer, a
# refusal's too (its message is a view as well).
FETCH = """
import json, sys
from coordinator.cli.client import AdminClient, ClientError
url, token, ca, paths = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
client = AdminClient(url, token, ca_file=ca)
def answer(path):
    try:
        return 200, json.dumps(client.request("GET", path))
    except ClientError as refused:
        return refused.status, f"{refused} {json.dumps(refused.problems)}"
print(json.dumps({path: answer(path) for path in paths}))
"""


# The query a route cannot answer without (422 naming it otherwise).
QUERIES = {"/v1/removed-machines": "?ref=w1", "/v1/pivot/import": "?schema=2"}
# The routes whose answer here is a refusal: a coordinator holding state takes no pivot.
REFUSED = {"/v1/pivot/import?schema=2": 409}


def api_views(f: Fleet, token: str, machine_ids: list[str]) -> dict[str, str]:
    """Every GET answer of the admin API: each route of the table, its parameters filled in
    with this cluster's name and each machine's id."""
    fills = {"name": ["lab"], "ref": machine_ids}
    paths: list[str] = []
    for route in ROUTES:
        if route.method != "GET" or route.auth != "admin" or "stream" in route.path:
            continue
        expanded = [route.path]
        for name, values in fills.items():
            if f"{{{name}}}" in route.path:
                expanded = [p.replace(f"{{{name}}}", v) for p in expanded for v in values]
        paths += [p + QUERIES.get(route.path, "") for p in expanded]
    served = f.coordinator
    out = subprocess.run([*served.prefix, sys.executable, "-c", FETCH, served.url, token,
                          str(served.ca_file), json.dumps(paths)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    answers = json.loads(out)
    assert {path: status for path, (status, _) in answers.items() if status != 200} == REFUSED, \
        answers
    return {path: text for path, (_, text) in answers.items()}


def logs(tmp: Path) -> list[tuple[str, str]]:
    """The coordinator's and the agents' logs."""
    return [(p.name, p.read_text(errors="replace")) for p in tmp.glob("*.log")]


def database(tmp: Path) -> list[tuple[str, str]]:
    """The coordinator's data dir files, database and write-ahead log included, as bytes."""
    return [(str(p), p.read_bytes().decode("latin-1")) for p in (tmp / "coordinator").rglob("*")
            if p.is_file() and re.search(r"\.(db|db-wal|db-shm|sqlite.*)$", p.name)]
