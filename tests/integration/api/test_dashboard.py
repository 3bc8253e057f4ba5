"""The dashboard as a person uses it: Debian's Chromium, headless, driven by Playwright (its
auto-waiting assertions read what is on screen), against a real `coordinator serve`.

A screenshot after approving a machine is kept: its path is printed, under build/test-artifacts
(or $TEST_ARTIFACTS_DIR)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.support.harness import ServedCoordinator, running_coordinator
from tests.support.requirements import require_binary

ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS_DIR",
                                Path(__file__).resolve().parents[3] / "build" / "test-artifacts"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-background-networking"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = require_binary("chromium")
    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[ServedCoordinator]:
    with running_coordinator(tmp_path) as served:
        yield served


@pytest.fixture
def page(browser: Browser, coordinator: ServedCoordinator) -> Iterator[Page]:
    # The coordinator's certificate is signed by its own CA, which this fresh browser profile
    # does not know: accept it, as an operator does once (or imports ca.crt).
    context = browser.new_context(viewport={"width": 1400, "height": 950}, ignore_https_errors=True)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.on("console", lambda message: errors.append(message.text)  # what the CSP blocked
              if "Content Security Policy" in message.text else None)
    yield opened
    context.close()
    assert errors == [], f"JavaScript errors or blocked content on the page: {errors}"


def sign_in(page: Page, c: ServedCoordinator) -> None:
    shown = page.goto(c.url + "/")
    assert shown is not None and "script-src 'self'" in shown.headers["content-security-policy"]
    page.get_by_label("Token").fill(c.token_file.read_text().strip())
    page.get_by_role("button", name="Connect").click()
    expect(page.locator("#live")).to_have_text("live")


def keep(page: Page, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    page.screenshot(path=str(shot), full_page=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    kept = Path(shutil.copy(shot, ARTIFACTS / name))
    print(f"\nscreenshot: {kept}")
    return kept


def test_approving_a_machine_shows_its_rollout_live_without_a_reload(
        page: Page, coordinator: ServedCoordinator, tmp_path: Path) -> None:
    c = coordinator
    m1 = c.register("m1")
    c.register("w1")
    c.register("w2", failing=True)
    sign_in(page, c)
    rows = page.locator("#machine-table tbody tr")
    expect(rows).to_have_count(3)
    approved_stage = page.locator("#stages li[data-stage=approved]")
    expect(approved_stage).to_have_attribute("data-state", "failing")
    expect(approved_stage).to_contain_text("w2 fails hard prechecks: os: Plan 9 is not supported")
    row = page.locator("tr[data-hostname=m1]")
    expect(row.locator("td.note")).to_have_text("waiting for approval")
    expect(page.locator("tr[data-hostname=w2] button.approve")).to_be_disabled()
    page.evaluate("window.notReloaded = true")

    row.get_by_label("Role for m1").select_option("manager")
    row.get_by_role("button", name="Approve").click()
    expect(page.locator("#notice")).to_contain_text("m1 approved as manager")
    expect(row.locator("td.state")).to_have_text("Prepare")  # the reconciler moved it; pushed live
    expect(row.locator("td.role")).to_have_text("manager")
    expect(row.locator("td.step")).to_have_text("1/1 base (next)")
    expect(row.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.locator("#stages li[data-stage=prepared]")).to_have_attribute(
        "data-state", "in-progress")
    keep(page, tmp_path, "dashboard-after-approve.png")

    c.report_item(m1, "base", "succeeded", output="base: configured\nsysctl applied\n")
    expect(row.locator("td.state")).to_have_text("Deploy")
    c.report_item(m1, "control-plane", "failed", attempt=2, exit_code=1, error="exit status 1",
                  output="kubeadm: port 6443 in use\n")
    expect(row.locator("td.step")).to_have_text("1/1 control-plane (attempt 2)")
    expect(row.locator("td.note")).to_contain_text("exit status 1")
    expect(page.locator("#stages li[data-stage=first-manager]")).to_have_attribute(
        "data-state", "failing")
    assert page.evaluate("window.notReloaded") is True

    row.get_by_role("button", name="m1").click()
    detail = page.locator("#detail")
    expect(detail.locator("#history tbody tr")).to_have_count(2)
    expect(detail.locator("#history tbody tr").first).to_contain_text("deploy/control-plane")
    expect(detail.locator("#output pre").first).to_have_text("kubeadm: port 6443 in use\n")
    expect(detail.locator("#output")).to_contain_text("sysctl applied")
    keep(page, tmp_path, "dashboard-machine-detail.png")


def test_search_filters_sort_and_role_assignment(page: Page, coordinator: ServedCoordinator) -> None:
    c = coordinator
    for hostname in ("worker-b", "worker-a", "edge-1"):
        c.register(hostname)
    c.admin.request("POST", "/v1/machines/edge-1/approve", body={})  # approved, no role yet
    sign_in(page, c)
    names = page.locator("#machine-table tbody td.hostname")
    expect(names).to_have_text(["edge-1", "worker-a", "worker-b"])
    page.get_by_role("button", name="Hostname").click()
    expect(names).to_have_text(["worker-b", "worker-a", "edge-1"])
    page.get_by_label("Search").fill("worker")
    expect(names).to_have_text(["worker-b", "worker-a"])
    expect(page.locator("#shown")).to_have_text("2 of 3 shown")
    page.get_by_label("Search").fill("")

    edge = page.locator("tr[data-hostname=edge-1]")
    expect(edge.locator("td.note")).to_have_text("approved; waiting for a role")
    edge.get_by_label("Role for edge-1").select_option("worker")
    edge.get_by_role("button", name="Set role").click()
    expect(page.locator("#notice")).to_contain_text("edge-1 is a worker")
    expect(edge.locator("td.state")).to_have_text("Prepare")

    page.get_by_label("Filter by state").select_option("Pending")
    expect(names).to_have_text(["worker-b", "worker-a"])
    page.get_by_label("Filter by role").select_option("worker")
    expect(names).to_have_count(0)
    page.get_by_label("Filter by state").select_option("")
    expect(names).to_have_text(["edge-1"])


def test_a_wrong_token_is_refused_and_a_good_one_is_kept_for_the_tab(
        page: Page, coordinator: ServedCoordinator) -> None:
    page.goto(coordinator.url + "/")
    page.get_by_label("Token").fill("admin_wrong")
    page.get_by_role("button", name="Connect").click()
    expect(page.get_by_role("alert")).to_have_text("unknown or revoked admin token")
    expect(page.locator("#app")).to_be_hidden()
    sign_in(page, coordinator)
    page.reload()
    expect(page.locator("#live")).to_have_text("live")
    expect(page.locator("#login")).to_be_hidden()
    page.get_by_role("button", name="Forget token").click()
    expect(page.get_by_label("Token")).to_be_visible()


def test_an_item_given_up_on_is_said_and_an_admin_retries_it_a_reader_cannot(
        page: Page, coordinator: ServedCoordinator, tmp_path: Path) -> None:
    c = coordinator
    m1 = c.register("m1")
    c.admin.request("POST", "/v1/machines/m1/approve", body={"role": "manager"})
    c.wait_state("m1", "Prepare")
    for attempt in (1, 2, 3):
        c.report_item(m1, "base", "running", attempt=attempt)
        c.report_item(m1, "base", "failed", attempt=attempt, exit_code=2, gave_up=attempt == 3,
                      error="sh exited with 2 (expected 0)", output="no /etc/app.conf\n")
    reader = c.admin.request("POST", "/v1/admin-tokens",
                             body={"name": "viewer", "role": "read-only"})["token"]

    # A read-only token sees what happened and what to do, and no button to do it.
    page.goto(c.url + "/")
    page.get_by_label("Token").fill(reader)
    page.get_by_role("button", name="Connect").click()
    row = page.locator("tr[data-hostname=m1]")
    note = ("gave up after 3 attempts (failing for", "sh exited with 2 (expected 0); fix the "
            "cause, then retry (coordinator machines retry m1)")
    for part in note:
        expect(row.locator("td.note")).to_contain_text(part)
    expect(page.locator("#stages li[data-stage=prepared]")).to_contain_text(
        "m1: its agent gave up on base after 3 attempts")
    expect(row.locator("td.step")).to_have_text("1/1 base (attempt 3)")
    expect(row.get_by_role("button", name="Retry")).to_have_count(0)
    keep(page, tmp_path, "dashboard-gave-up-read-only.png")

    # An admin retries it: the agent's assignment carries the retry, the note moves on.
    page.get_by_role("button", name="Forget token").click()
    sign_in(page, c)
    for part in note:
        expect(row.locator("td.note")).to_contain_text(part)
    keep(page, tmp_path, "dashboard-gave-up.png")
    row.get_by_role("button", name="Retry").click()
    expect(page.locator("#notice")).to_contain_text("m1: base runs again (retry 1)")
    expect(row.get_by_role("button", name="Retry")).to_have_count(0)
    expect(row.locator("td.note")).to_contain_text("retry in 0s")
    assert c.assignment(m1)["retries"] == 1
    c.report_item(m1, "base", "running", attempt=1)
    expect(row.locator("td.step")).to_contain_text("1/1 base (attempt 1")
    expect(row.locator("td.note")).to_have_text("")
    keep(page, tmp_path, "dashboard-after-retry.png")
