"""Artifact downloads from a real `coordinator serve` against nginx (Debian's package) serving
the same file with the same certificate on the same machine, side by side in one run, while a
few hundred simulated agents heartbeat to the coordinator.

    # the issue's figure: 20 concurrent downloads of a 256 MiB artifact from each
    .venv/bin/python bench/artifacts.py --downloads 20 --size-mib 256 --agents 300
    # seconds, small (CI runs it so that the script keeps working)
    .venv/bin/python bench/artifacts.py --quick

The coordinator runs with `--artifact-port` (the API answers 307 to a signed link there,
curl follows it); `--in-loop` measures it without, its event loop serving the bytes.
nginx runs as the current user from a temporary prefix on a loopback port (its default
`worker_processes auto`, sendfile on); the downloads are curl processes writing to /dev/null
(a client in C, so that the client's cost is the same for both servers), each with the
machine credential of a registered agent. Prints each server's throughput (all bytes over
the wall time of the round), the ratio coordinator/nginx, each server's CPU time per GiB sent
(on a machine others share, steadier than throughput), and the agents' heartbeat latency
p50/p99 while the coordinator serves the downloads.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pwd
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleet import Plan, cluster_spec, simulate
from tests.support.builders import registration
from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.ports import free_port
from tests.support.probes import ms, percentile

ARTIFACT = "bundle.bin"
NGINX_CONFIG = """\
{user}worker_processes auto;
daemon off;
master_process on;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location /v1/artifacts/ {{ alias {store}/; }}
    }}
}}
"""


def nginx_binary() -> str:
    path = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.access(path, os.X_OK):
        raise SystemExit("nginx is not installed: apt-get install nginx-light")
    return path


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) of a process and all its descendants alive now: nginx's
    workers, the coordinator's artifact process."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += sum(cpu_seconds(int(child))
                         for child in (task / "children").read_text().split())
    except (OSError, IndexError, ValueError):  # gone meanwhile
        pass
    return total


@contextmanager
def running_nginx(prefix: Path, served: ServedCoordinator,
                  store: Path) -> Iterator[tuple[str, int]]:
    """nginx from a temporary prefix with the coordinator's certificate, serving its artifact
    store under the same path; its base URL and its master's pid."""
    port = free_port()
    pki = served.data / "pki"
    user = f"user {pwd.getpwuid(os.getuid()).pw_name};\n" if os.geteuid() == 0 else ""
    config = prefix / "nginx.conf"
    config.write_text(NGINX_CONFIG.format(user=user, prefix=prefix, port=port,
                                          cert=pki / "server.crt", key=pki / "server.key",
                                          store=store))
    process = subprocess.Popen([nginx_binary(), "-p", str(prefix), "-c", str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"https://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while subprocess.run(["curl", "-s", "-o", "/dev/null", "--cacert", str(served.ca_file),
                              url], check=False).returncode != 0:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"nginx did not start: {process.communicate()[1].decode()}")
            time.sleep(0.1)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(timeout=10)


def download_round(url: str, ca_file: Path, credential: str, downloads: int,
                   size: int) -> float:
    """`downloads` curl processes at once, each fetching the whole artifact; bytes per second
    over the round's wall time (every download must have received every byte)."""
    argv = ["curl", "-sS", "--fail", "--location", "-o", "/dev/null", "-w", "%{size_download}",
            "--cacert", str(ca_file), "-H", f"Authorization: Bearer {credential}",
            f"{url}/v1/artifacts/{ARTIFACT}"]
    started = time.monotonic()
    clients = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for _ in range(downloads)]
    outputs = [client.communicate() for client in clients]
    elapsed = time.monotonic() - started
    for client, (out, err) in zip(clients, outputs, strict=True):
        if client.returncode != 0 or int(out or 0) != size:
            raise SystemExit(f"a download from {url} failed: {out.decode()} {err.decode()}")
    return downloads * size / elapsed


def register_one(served: ServedCoordinator, token: str) -> str:
    """A machine credential: one agent registered (Pending suffices for artifacts)."""
    answer = served.client(token).request("POST", "/v1/agent/register",
                                          body=registration("downloader", token))
    return str(answer["credential"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--downloads", type=int, default=20, help="concurrent downloads")
    parser.add_argument("--size-mib", type=int, default=256, help="the artifact's size")
    parser.add_argument("--agents", type=int, default=300, help="simulated agents heartbeating")
    parser.add_argument("--heartbeat-interval", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds per server, alternating; the best of each is printed")
    parser.add_argument("--in-loop", action="store_true",
                        help="no --artifact-port: the API's event loop serves the bytes itself")
    parser.add_argument("--quick", action="store_true",
                        help="4 downloads of 16 MiB, 20 agents, one round: seconds")
    args = parser.parse_args()
    if args.quick:
        args.downloads, args.size_mib, args.agents, args.rounds = 4, 16, 20, 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    size = args.size_mib * 2**20
    with tempfile.TemporaryDirectory() as tmp, running_coordinator(
            Path(tmp), cluster_spec(50, 30.0),
            ["--register-rate", "0", "--register-rate-total", "0",
             "--connections-per-address", "0",
             *([] if args.in_loop else ["--artifact-port", str(free_port())])]) as served:
        store = (served.data / "artifacts").resolve()
        with open(store / ARTIFACT, "wb") as artifact:
            for _ in range(args.size_mib):
                artifact.write(os.urandom(2**20))
        token = served.admin.request("POST", "/v1/clusters/fleet/join-tokens",
                                     body={"ttl": "0"})["token"]
        credential = register_one(served, token)
        nginx_prefix = Path(tmp) / "nginx"
        nginx_prefix.mkdir()
        context = multiprocessing.get_context("spawn")
        mine, theirs = context.Pipe()
        plan = Plan(served.url, str(served.ca_file), token,
                    [f"agent-{i:04d}" for i in range(args.agents)], args.heartbeat_interval, 32)
        agents = context.Process(target=simulate, args=(plan, theirs), daemon=True)
        agents.start()
        assert mine.recv()[0] == "registered"
        time.sleep(args.heartbeat_interval)
        rates: dict[str, list[float]] = {"nginx": [], "coordinator": []}
        windows: dict[str, list[tuple[float, float]]] = {"nginx": [], "coordinator": []}
        cpu = {"nginx": 0.0, "coordinator": 0.0}
        with running_nginx(nginx_prefix, served, store) as (nginx_url, nginx_pid):
            for _ in range(args.rounds):
                for server, url, pid in (("nginx", nginx_url, nginx_pid),
                                         ("coordinator", served.url, served.pid)):
                    started, before = time.monotonic(), cpu_seconds(pid)
                    rates[server].append(download_round(url, served.ca_file, credential,
                                                        args.downloads, size))
                    cpu[server] += cpu_seconds(pid) - before
                    windows[server].append((started, time.monotonic()))
        mine.send("stop")
        _, calls, _, errors, _ = mine.recv()
        agents.join(timeout=30)
    print(f"{args.downloads} concurrent downloads of {args.size_mib} MiB over TLS, "
          f"{args.rounds} round(s) each, best of each; load {os.getloadavg()[0]:.1f}")
    for server in ("nginx", "coordinator"):
        print(f"  {server + ':':13s}{max(rates[server]) / 1e6:6.0f} MB/s "
              f"(rounds: {', '.join(f'{r / 1e6:.0f} MB/s' for r in rates[server])})")
    print(f"  ratio coordinator/nginx: {max(rates['coordinator']) / max(rates['nginx']):.2f}")
    # CPU per byte does not depend on what else the machine runs, as throughput does; the
    # coordinator's includes answering the agents' heartbeats meanwhile.
    gib = args.rounds * args.downloads * size / 2**30
    print(f"  server CPU per GiB sent: nginx {cpu['nginx'] / gib:.2f} s, coordinator "
          f"{cpu['coordinator'] / gib:.2f} s")
    for server in ("nginx", "coordinator"):  # nginx's: what the machine's load alone costs
        during = [seconds for t, endpoint, seconds in calls if endpoint == "heartbeat"
                  and any(start <= t <= end for start, end in windows[server])]
        if during:
            print(f"  heartbeats of {args.agents} agents to the coordinator while {server} "
                  f"serves the downloads: n={len(during)} p50 {ms(statistics.median(during))} "
                  f"p99 {ms(percentile(during, 0.99))} max {ms(max(during))}")
    if errors:
        print("  errors:", errors)


if __name__ == "__main__":
    main()
