"""The control plane's certificate expiry, as an operator watches it: the client certificate
of the kubeconfig a manager reported shows in the status (API and `coordinator status`) with a
warning and what to run once it expires within 30 days, and a renewal release's item, which
reports the renewed kubeconfig, moves it; the kubeconfig itself never shows. The API server's
serving certificate, read from its handshake, shows and warns likewise."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

from coordinator.domain.nodes.nodes import MACHINE_ID_LABEL
from tests.support.harness import InProcessCoordinator, ManualClock, in_process_coordinator
from tests.support.k8s_doubles import pki
from tests.support.kubeapi import Cluster, kube_api_server

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
DAY = 86400.0
SPEC = """\
name: lab
release: "{release}"
settings:
  drain: {{enabled: false}}
  kubernetes: {{certificateRenewal: &renewal "{renewal}"}}
machineTypes:
  manager:
    - {{name: init, phase: deploy, kubeconfigFrom: /etc/kubernetes/admin.conf,
       action: {{type: exec, argv: [kubeadm, init]}}}}
    - {{name: certs-renew, phase: upgrade, version: *renewal,
       kubeconfigFrom: /etc/kubernetes/admin.conf,
       action: {{type: exec, argv: [kubeadm, certs, renew, all]}}}}
  worker:
    - {{name: join, phase: deploy, action: {{type: exec, argv: [kubeadm, join]}}}}
"""


async def ready_at(env: InProcessCoordinator, agent: dict[str, str], release: str,
                   kubeconfig: str) -> None:
    async def ready() -> bool:
        await env.report_all(agent, kubeconfig=kubeconfig)
        found = await env.machine("m1")
        return found["state"] == "Ready" and found["release"] == release
    await env.until(f"m1 Ready at release {release}", ready)


async def test_an_expiring_certificate_warns_in_status_until_a_renewal_reports_a_new_one(
        tmp_path: Path) -> None:
    authority = pki.ca({}, "ca", "kubernetes", at=NOW - 300 * DAY)
    with kube_api_server(Cluster()) as kube:
        expiring = pki.admin_kubeconfig(kube.url, authority, NOW + 12 * DAY)
        renewed = pki.admin_kubeconfig(kube.url, authority, NOW + 365 * DAY)
        spec = SPEC.format(release="1", renewal="initial")
        async with in_process_coordinator(tmp_path, spec, clock=ManualClock(NOW)) as env:
            m1 = await env.register("m1")
            with kube.locked() as cluster:
                cluster.add_node("m1", {MACHINE_ID_LABEL: m1["machine_id"]})
            await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})
            await ready_at(env, m1, "1", expiring)

            status = await env.call("GET", "/v1/clusters/lab/status", 200)
            certs = status["certificates"]
            assert certs["source"] == "reported by m1"
            assert certs["subject"] == "CN=kubernetes-admin,O=kubeadm:cluster-admins"
            assert certs["not_after"] == NOW + 12 * DAY
            assert certs["warning"] == (
                "the client certificate of the kubeconfig the coordinator uses (reported by "
                "m1, CN=kubernetes-admin,O=kubeadm:cluster-admins) expires at "
                "2027-01-27T08:00:00Z, in 12 days")
            assert "settings.kubernetes.certificateRenewal" in certs["remedy"]
            user = json.loads(expiring)["users"][0]["user"]
            answer = json.dumps(status)
            assert user["client-key-data"] not in answer
            assert user["client-certificate-data"] not in answer
            shown = await env.cli("status", "lab")
            assert "certificates: the client certificate of the kubeconfig the coordinator" in shown
            assert "→ renew them before then: a new release that changes" in shown

            # A maintenance release: only the renewal's name changes, so only its item runs.
            await env.call("PUT", "/v1/clusters", 200,
                           data=SPEC.format(release="2", renewal="2027-01"))
            await ready_at(env, m1, "2", renewed)
            certs = (await env.call("GET", "/v1/clusters/lab/status", 200))["certificates"]
            assert certs["not_after"] == NOW + 365 * DAY and certs["warning"] == ""
            shown = await env.cli("status", "lab")
            assert "certificates: the coordinator's client certificate (reported by m1, " \
                   "CN=kubernetes-admin,O=kubeadm:cluster-admins) expires at" in shown


@contextlib.asynccontextmanager
async def api_server(tmp_path: Path, pair: pki.Pair) -> AsyncIterator[str]:
    """A TLS server serving pair's certificate, standing for an API server: it closes every
    connection after the handshake. Its https URL."""
    (tmp_path / "serving.crt").write_text(pair["cert"])
    (tmp_path / "serving.key").write_text(pair["key"])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "serving.crt", tmp_path / "serving.key")

    async def hang_up(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0, ssl=context)
    try:
        yield f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def test_the_api_servers_serving_certificate_shows_and_warns_too(tmp_path: Path) -> None:
    authority = pki.ca({}, "ca", "kubernetes", at=NOW - 300 * DAY)
    serving = pki.leaf(authority, "kube-apiserver", ["127.0.0.1"], server=True, client=False,
                       at=NOW - 360 * DAY)
    async with api_server(tmp_path, serving) as url, \
            in_process_coordinator(tmp_path, SPEC.format(release="1", renewal="initial"),
                                   clock=ManualClock(NOW)) as env:
        m1 = await env.register("m1")
        await env.call("POST", "/v1/machines/m1/approve", 200, json={"role": "manager"})

        async def reported() -> bool:
            await env.report_all(m1, kubeconfig=pki.admin_kubeconfig(url, authority,
                                                                     NOW + 200 * DAY))
            status = await env.call("GET", "/v1/clusters/lab/status", 200)
            return (status["certificates"] or {}).get("serving") is not None
        await env.until("the serving certificate read", reported)

        certs = (await env.call("GET", "/v1/clusters/lab/status", 200))["certificates"]
        assert certs["serving"] == {
            "server": url, "subject": "CN=kube-apiserver", "not_after": NOW + 5 * DAY,
            "expires_in_seconds": 5 * DAY, "problem": ""}
        assert certs["warning"] == (
            f"the API server's serving certificate ({url}, CN=kube-apiserver) expires at "
            "2027-01-20T08:00:00Z, in 5 days")
        assert certs["not_after"] == NOW + 200 * DAY
        assert "certificates: the API server's serving certificate" in await env.cli("status", "lab")
