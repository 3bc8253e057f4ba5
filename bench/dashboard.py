"""What one open dashboard costs the coordinator at 10,000 machines: its CPU (psutil on the
`coordinator serve` process) over a steady window with no dashboard and with one open in
headless Chromium, side by side in one run; the time to the first view (status and the first
page of machines, from the navigation's start); then the same two windows while machines
change state a few times a second (approvals made through the API), which the dashboard follows
by its event stream.

    .venv/bin/python bench/dashboard.py [--machines 10000] [--window 30] [--rate 3] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
from playwright.sync_api import Page, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for the tests' harness

from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.requirements import require_binary
from tests.support.seeding import pending_machine, seed, settled

FIRST_VIEW = """machines => document.querySelectorAll('#machine-table tbody tr').length
    === Math.min(machines, 100) && document.querySelector('#shown').textContent
    .endsWith(` of ${machines}`) && document.querySelector('#cluster-summary').textContent"""


def cpu_share(pid: int, seconds: float) -> float:
    """The share of one core the process used over the next seconds."""
    process = psutil.Process(pid)
    before = sum(process.cpu_times()[:2])
    time.sleep(seconds)
    return (sum(process.cpu_times()[:2]) - before) / seconds


def approvals(c: ServedCoordinator, rate: float, hostnames: Iterator[str]) -> Callable[[], None]:
    """Start approving one Pending machine every 1/rate s (each then moves to Prepare: a few
    events); the returned function stops it."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(1 / rate):
            c.admin.request("POST", f"/v1/machines/{next(hostnames)}/approve",
                            body={"role": "worker"})

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def stopped() -> None:
        stop.set()
        thread.join()
    return stopped


def opened(page: Page, c: ServedCoordinator, machines: int) -> float:
    """Milliseconds from navigating to the dashboard (token kept in the tab) to its first view."""
    page.goto(c.url + "/")
    page.evaluate("token => sessionStorage.setItem('nodeagent.adminToken', token)",
                  c.token_file.read_text().strip())
    page.reload()
    page.wait_for_function(FIRST_VIEW, arg=machines, polling="raf", timeout=60_000)
    took: float = page.evaluate("performance.now()")
    page.wait_for_function("() => document.querySelector('#live').textContent === 'live'")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", type=int, default=10_000)
    parser.add_argument("--window", type=float, default=30.0, help="seconds of each measurement")
    parser.add_argument("--rate", type=float, default=3.0, help="state changes a second")
    parser.add_argument("--quick", action="store_true", help="200 machines, 1 s windows")
    args = parser.parse_args()
    if args.quick:  # every window still sees its approvals (3/s); CI runs it, and waits
        args.machines, args.window = 200, 1.0
    hostnames = (f"node-{n:05d}" for n in itertools.count())
    with tempfile.TemporaryDirectory() as tmp, running_coordinator(Path(tmp)) as c:
        now = time.time()
        seed(c, [pending_machine(n, "lab", now) for n in range(args.machines)])
        idle = cpu_share(c.pid, args.window)
        stop = approvals(c, args.rate, hostnames)
        changing = cpu_share(c.pid, args.window)
        stop()
        settled(c.pid)
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=require_binary("chromium"),
                                             args=["--headless", "--no-sandbox"])
            page = browser.new_context(ignore_https_errors=True).new_page()
            first_view = opened(page, c, args.machines)
            settled(c.pid)
            idle_open = cpu_share(c.pid, args.window)
            stop = approvals(c, args.rate, hostnames)
            changing_open = cpu_share(c.pid, args.window)
            stop()
            browser.close()
    print(f"{args.machines} machines, {args.window:.0f} s windows; coordinator CPU, share of a core")
    print(f"{'scenario':<32} {'dashboard closed':>17} {'dashboard open':>15} {'difference':>11}")
    for name, closed, open_ in (("steady (no changes)", idle, idle_open),
                                (f"{args.rate:g} state changes/s", changing, changing_open)):
        print(f"{name:<32} {closed:>16.1%} {open_:>15.1%} {open_ - closed:>+11.1%}")
    print(f"first view (status + first page): {first_view:.0f} ms from navigation")


if __name__ == "__main__":
    main()
