// The coordinator's dashboard: plain DOM code, no build step. Everything it shows comes from
// the admin API with the token kept in sessionStorage. The machine table is one page the
// coordinator filtered, sorted and cut (GET /v1/machines), so 10,000 machines cost the browser
// no more than 100. A server-sent event stream (read with fetch, so it can carry the token)
// says what changed: only those rows and the status are fetched again, and nothing while the
// tab is hidden. Elapsed times tick here, from when each row was fetched.
"use strict";

const TOKEN_KEY = "nodeagent.adminToken";
const STATES = ["Pending", "Prepare", "Deploy", "Ready", "Upgrade", "Reconfigure", "Deleting"];
const MARKS = { done: "✓", "in-progress": "…", failing: "✗", waiting: "·" };

const view = {
  clusters: [],
  role: null,             // the token's: "admin" may change things, "read-only" not
  cluster: null,          // selected cluster name
  status: null,           // its /status document
  sort: { key: "hostname", dir: 1 },
  page: { machines: [], total: 0, offset: 0, limit: 100 }, // the table's page, as the API cut it
  fetchedAt: new Map(),   // machine id -> the browser's clock (s) when its row was fetched
  changed: new Set(),     // ids of shown machines that events said changed since their fetch
  stale: false,           // events came while the tab was hidden: catch up when it shows
  pageMayMove: false,     // an event may have moved a machine into or out of the page
  detailChanged: false,   // an event was about the machine whose history is open
  detail: null,           // id of the machine whose history is open
  stream: null,           // AbortController of the event stream
};

const $ = (selector) => document.querySelector(selector);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  const s = Math.floor(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

// 24-hour local time, as the CLI prints it (its time.localtime): the viewer's time zone.
const pad = (n) => String(n).padStart(2, "0");
const clock = (t) => {
  if (!t) return "-";
  const d = new Date(t * 1000);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
};
const dayAndTime = (t) => {
  const d = new Date(t * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock(t)}`;
};

function notify(text, isError = false) {
  const line = el("p", { class: isError ? "error" : "" }, text);
  $("#notice").append(line);
  setTimeout(() => line.remove(), isError ? 10000 : 5000);
}

// -- API --------------------------------------------------------------------------------

class Unauthorized extends Error {}

async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => ({}));
  if (response.status === 401) throw new Unauthorized(data.error || "unauthorized");
  if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
  return data;
}

// -- login ------------------------------------------------------------------------------

function showLogin(message = "") {
  stopStream();
  view.role = null; // the next token may have another
  $("#app").hidden = true;
  $("#forget").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message;
  $("#token").focus();
}

async function start() {
  $("#login").hidden = true;
  try {
    view.role = (await api("GET", "/v1/whoami")).role;
    await refresh();
  } catch (error) {
    if (error instanceof Unauthorized) return showLogin(error.message);
    notify(error.message, true);
  }
  $("#app").hidden = false;
  $("#forget").hidden = false;
  startStream();
}

// -- data -------------------------------------------------------------------------------

const PAGE_SIZE = 100;
const now = () => Date.now() / 1000;

// Everything the view shows, for the selected cluster: on start, on choosing a cluster, after
// the stream was down. The status comes without its machines (the table's page has them).
async function refresh() {
  if (view.role === null) view.role = (await api("GET", "/v1/whoami")).role;
  view.clusters = await api("GET", "/v1/clusters");
  if (!view.clusters.some((c) => c.name === view.cluster)) {
    view.cluster = view.clusters.length ? view.clusters[0].name : null;
  }
  await Promise.all([loadStatus(), loadPage()]);
  render();
  if (view.detail) await renderDetail();
  await loadEvents();
}

async function loadStatus() {
  view.status = view.cluster
    ? await api("GET", `/v1/clusters/${encodeURIComponent(view.cluster)}/status?machines=false`) : null;
}

function machineQuery() {
  const query = new URLSearchParams({ cluster: view.cluster, limit: String(PAGE_SIZE),
    offset: String(view.page.offset), sort: `${view.sort.dir < 0 ? "-" : ""}${view.sort.key}` });
  const text = $("#search").value.trim();
  const role = $("#filter-role").value;
  const responding = $("#filter-responding").value;
  const label = $("#filter-label").value.trim();
  if (text) query.set("q", text);
  if ($("#filter-state").value) query.set("state", $("#filter-state").value);
  if (role) query.set("role", role);
  if (responding) query.set("responding", responding);
  if (label) query.append("label", label);
  return query;
}

function fetched(machines) {
  const at = now();
  for (const m of machines) view.fetchedAt.set(m.id, at);
}

// The current page of the table, as the coordinator filtered and sorted it.
async function loadPage() {
  if (!view.cluster) {
    view.page = { machines: [], total: 0, offset: 0, limit: PAGE_SIZE };
    return;
  }
  const page = await api("GET", `/v1/machines?${machineQuery()}`);
  if (page.machines.length === 0 && page.offset > 0 && page.total > 0) {
    view.page.offset = Math.max(0, Math.floor((page.total - 1) / PAGE_SIZE) * PAGE_SIZE);
    return loadPage(); // the page emptied under us: its last one
  }
  view.page = page;
  view.changed.clear();
  view.fetchedAt.clear();
  fetched(page.machines);
}

async function reloadPage() {
  await loadPage();
  if (view.status) renderMachines();
}

// Only the shown rows events said changed, by id, and the status beside them, side by side.
async function refreshChanged() {
  const ids = [...view.changed].filter((id) => view.page.machines.some((m) => m.id === id));
  view.changed.clear();
  const total = view.status ? count(view.status) : 0;
  const [rows] = await Promise.all([loadRows(ids), loadStatus()]);
  if ((view.status ? count(view.status) : 0) !== total || view.pageMayMove) {
    // A machine came or went, or one may have entered or left the filter: this one page again.
    view.pageMayMove = false;
    await loadPage();
  } else {
    const byId = new Map(rows.map((m) => [m.id, m]));
    view.page.machines = view.page.machines.map((m) => byId.get(m.id) || m);
    fetched(rows);
  }
  render();
  if (view.detail && (ids.includes(view.detail) || view.detailChanged)) await renderDetail();
  view.detailChanged = false;
}

const count = (status) => Object.values(status.counts).reduce((a, b) => a + b, 0);

async function loadRows(ids) {
  if (!ids.length) return [];
  const query = new URLSearchParams({ cluster: view.cluster, limit: String(ids.length) });
  for (const id of ids) query.append("id", id);
  return (await api("GET", `/v1/machines?${query}`)).machines;
}

function soon(task, wait = 150) {
  // Many events arrive together during a rollout: one run of task for a burst, never two at
  // once (a slow answer must not pile up requests behind it): asked again while it runs, it
  // runs once more, wait after the first finished.
  let pending = null;
  let running = false;
  let again = false;
  const run = async () => {
    pending = null;
    running = true;
    try {
      await task();
    } catch (error) {
      if (error instanceof Unauthorized) showLogin(error.message);
    } finally {
      running = false;
    }
    if (again) {
      again = false;
      pending = setTimeout(run, wait);
    }
  };
  return () => {
    if (running) again = true;
    else if (!pending) pending = setTimeout(run, wait);
  };
}

// Following the stream: at most one status and one request for changed rows a second,
// however many machines change (as often as `status --watch` asks).
const FOLLOW_MS = 1000;

const refreshSoon = soon(refresh);
const changedSoon = soon(refreshChanged, FOLLOW_MS);
const pageSoon = soon(reloadPage);

// -- live updates -------------------------------------------------------------------------

function setLive(on) {
  $("#live").className = `live ${on ? "on" : "off"}`;
  $("#live").textContent = on ? "live" : "reconnecting";
}

function stopStream() {
  if (view.stream) view.stream.abort();
  view.stream = null;
}

async function startStream() {
  stopStream();
  const controller = new AbortController();
  view.stream = controller;
  let lastId = null;
  while (!controller.signal.aborted) {
    try {
      const headers = { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ""}` };
      if (lastId !== null) headers["Last-Event-ID"] = String(lastId);
      const response = await fetch("/v1/events/stream", { headers, signal: controller.signal });
      if (response.status === 401) return showLogin("the admin token is no longer valid");
      if (!response.ok || !response.body) throw new Error(`stream: ${response.status}`);
      setLive(true);
      // The stream replays what it missed after Last-Event-ID; a first connection had refresh().
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart());
          const id = block.split("\n").find((l) => l.startsWith("id:"));
          if (id) lastId = Number(id.slice(3).trim());
          if (data.length) onEvent(JSON.parse(data.join("\n")));
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    setLive(false);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

// Filters or a sort on what changes (state, last seen...) may move a machine into or out of
// the page on any change of it; a plain sort by name moves rows only when machines come or go.
function pageFollowsChanges() {
  return ["#search", "#filter-state", "#filter-role", "#filter-responding", "#filter-label"]
    .some((input) => $(input).value.trim()) || !["hostname", "ip", "cluster"].includes(view.sort.key);
}

function onEvent(event) {
  if (document.hidden) {
    view.stale = true; // nothing while nobody looks: caught up when the tab shows again
    return;
  }
  eventsFollow();
  if (!view.cluster) return refreshSoon();
  if (event.kind.startsWith("cluster") && event.cluster !== view.cluster) return refreshSoon();
  if (event.cluster !== view.cluster) return;
  if (event.machine) {
    if (view.page.machines.some((m) => m.id === event.machine)) view.changed.add(event.machine);
    if (pageFollowsChanges()) view.pageMayMove = true; // it may have entered or left the page
    if (event.machine === view.detail) view.detailChanged = true;
  }
  changedSoon();
}

function caughtUp() {
  if (document.hidden || !view.stale) return;
  view.stale = false;
  refreshSoon();
}

// -- rendering --------------------------------------------------------------------------

function render() {
  renderClusters();
  const status = view.status;
  $("#overview").hidden = !status;
  $("#plan").hidden = !status;
  $("#machines").hidden = !status;
  if (!status) {
    $("#clusters").replaceChildren(el("p", {}, "No cluster yet: apply one with `coordinator cluster apply -f`."));
    return;
  }
  const counts = Object.entries(status.counts).map(([s, n]) => `${n} ${s}`).join(", ") || "no machines";
  $("#cluster-summary").textContent = `Release ${status.release}, generation ${status.generation}: ${counts}`;
  const rollout = status.rollout;
  $("#rollout-bar").max = Math.max(rollout.total, 1);
  $("#rollout-bar").value = rollout.done;
  const eta = rollout.held ? `none, ${rollout.held}` : rollout.eta_seconds === null ? "estimating" : rollout.eta_seconds === 0 ? "done" : duration(rollout.eta_seconds);
  $("#rollout-text").textContent = `${rollout.done}/${rollout.total} items on ${rollout.machines} machine${rollout.machines === 1 ? "" : "s"} · ETA ${eta}`;
  renderPool(status);
  $("#stages").replaceChildren(...status.stages.map((stage) => el("li", { "data-stage": stage.name, "data-state": stage.state },
    el("span", { class: `mark state-${stage.state}` }, MARKS[stage.state]),
    el("span", {}, el("strong", {}, stage.title), " ", el("span", { class: `state state-${stage.state}` }, stage.state)),
    el("span", { class: "since", title: "entered this state" }, clock(stage.since)),
    el("span", { class: "message" }, stage.message))));
  renderMachines();
}

// A cluster held for its provision step (with the button that provisions it, for an admin
// token), and how its claims on the machine pool stand, with what it cannot fill and why.
function renderPool(status) {
  const parts = [];
  if (status.held) {
    parts.push(el("p", { class: "held" }, "Held: approved and claimed machines wait in Pending until the cluster is provisioned. ",
      view.role === "admin" ? el("button", {
        type: "button", id: "provision",
        onclick: async () => {
          try {
            const answer = await api("POST", `/v1/clusters/${encodeURIComponent(status.cluster)}/provision`);
            notify(answer.provisioned ? `${answer.cluster} provisioned: its machines start` : `${answer.cluster} was not held`);
            refreshSoon();
          } catch (error) {
            if (error instanceof Unauthorized) return showLogin(error.message);
            notify(error.message, true);
          }
        },
      }, "Provision") : null));
  }
  if (status.pool) {
    const roles = status.pool.roles.map((r) => `${r.held}/${r.wanted} ${r.role}s`).join(", ");
    if (roles) parts.push(el("p", { class: "claims" }, `Claimed from the pool: ${roles}`));
    parts.push(...status.pool.notes.map((n) => el("p", { class: "note failing pool-note" }, n)));
  }
  $("#pool-status").replaceChildren(...parts);
}

// The upgrade plan, on demand: it reads the live cluster (each drain's forecast), so it is
// asked for by a click, not on every refresh.
async function loadPlan() {
  const cluster = view.cluster;
  $("#plan-body").replaceChildren(el("p", {}, "Reading the plan and the live cluster…"));
  try {
    const plan = await api("GET", `/v1/clusters/${encodeURIComponent(cluster)}/upgrade-plan`);
    if (cluster === view.cluster) renderPlan(plan);
  } catch (error) {
    if (error instanceof Unauthorized) return showLogin(error.message);
    $("#plan-body").replaceChildren(el("p", { class: "error" }, error.message));
  }
}

const planned = (m) => `${m.hostname} (${m.role}, from ${m.from || "-"})`;

function forecast(drain) {
  if (!drain) return null;
  const evicted = drain.evicted.length;
  return el("ul", { class: "forecast" },
    el("li", {}, `drain of node ${drain.node}: evicts ${evicted} pod${evicted === 1 ? "" : "s"}`
      + (evicted ? `: ${drain.evicted.slice(0, 5).join(", ")}${evicted > 5 ? " …" : ""}` : "")),
    ...drain.hindrances.map((h) => el("li", { class: `hindrance ${h.severity}`, "data-severity": h.severity },
      el("strong", {}, h.severity), " ", h.what, " ", el("span", { class: "remedy" }, h.remedy))));
}

function renderPlan(plan) {
  const head = el("p", {}, `Upgrade of ${plan.cluster} to release ${plan.release}`
    + (plan.paused ? " (paused: resume to start)" : ""));
  const steps = el("ol", { class: "plan-steps" }, ...plan.steps.map((step) => el("li", {},
    ...step.map((m) => el("div", { class: "planned", "data-host": m.hostname },
      `${planned(m)} runs ${m.items.map((i) => `${i.phase}/${i.name}`).join(", ")}`, forecast(m.drain))))));
  const more = [
    ...plan.waiting.map((m) => el("p", {}, `not reached: ${planned(m)}: ${m.reason}`)),
    plan.nothing_to_run.length ? el("p", {}, `nothing to run, recorded at ${plan.release}: `
      + plan.nothing_to_run.map(planned).join(", ")) : null,
    ...plan.notes.map((n) => el("p", { class: "note" }, `note: ${n}`)),
    ...plan.warnings.map((w) => el("p", { class: "warning" }, `warning: ${w}`)),
  ];
  const nothing = !plan.steps.length && !plan.waiting.length ? el("p", {}, "nothing to upgrade") : null;
  $("#plan-body").replaceChildren(...[head, nothing, plan.steps.length ? steps : null, ...more]
    .filter((part) => part !== null));
}

function renderClusters() {
  $("#clusters").replaceChildren(...view.clusters.map((c) => el("button", {
    type: "button", "aria-pressed": String(c.name === view.cluster),
    onclick: () => {
      view.cluster = c.name; view.detail = null; view.page.offset = 0; $("#detail").hidden = true;
      $("#plan-body").replaceChildren();
      refresh();
    },
  }, `${c.name} · ${c.release}${c.deleting ? " (deleting)" : ""}`)));
}


// The API decides each machine's note and remedy (the CLI shows the same words).
function note(m) {
  const { text, remedy } = m.note;
  return [el("span", { class: "note-text" }, text), remedy ? el("span", { class: "remedy" }, remedy) : null];
}

// Seconds since the row was fetched: elapsed times move on here, with no request.
const since = (m) => now() - (view.fetchedAt.get(m.id) || now());

function stepText(m) {
  const step = m.step || {};
  if (!step.item) return "-";
  // Named, not numbered: the items column beside it counts the done ones.
  if (step.status === "waiting") return `${step.item} (next)`;
  const elapsed = step.status === "running" ? `, ${duration(step.item_elapsed + since(m))}` : "";
  return `${step.item} (attempt ${step.attempt}${elapsed})`;
}

function roleSelect(m) {
  const select = el("select", { "aria-label": `Role for ${m.hostname}`, class: "role" },
    el("option", { value: "" }, "role…"),
    ...["manager", "worker"].map((r) => el("option", { value: r, selected: m.role === r }, r)));
  return select;
}

// What each action a machine's note offers does: the path under /v1/machines/ID it POSTs.
const ACTION_HELP = {
  "drain/retry": "drain again, with a new timeout",
  "drain/skip": "go on with the pods left on the (cordoned) node",
  "drain/force": "drain again, deleting the pods their budgets protect",
  "retry": "run the item its agent gave up on again, with a fresh attempt budget",
};

function actions(m) {
  if (view.role !== "admin") return []; // a read-only token sees the note, no buttons
  if (m.note.actions.length) return noteButtons(m);
  if (m.state !== "Pending") return [];
  const select = roleSelect(m);
  const blocked = m.precheck_failures.length > 0;
  const buttons = [select];
  if (!m.approved) {
    buttons.push(el("button", {
      type: "button", class: "approve", disabled: blocked,
      title: blocked ? "hard prechecks fail: fix the node first" : "approve (with the chosen role)",
      onclick: () => act(`/v1/machines/${m.id}/approve`, "POST", select.value ? { role: select.value } : {},
        (r) => `${r.hostname} approved${r.role ? ` as ${r.role}` : ""}`),
    }, "Approve"));
  }
  buttons.push(el("button", {
    type: "button", class: "set-role",
    onclick: () => {
      if (!select.value) return notify(`choose a role for ${m.hostname} first`, true);
      act(`/v1/machines/${m.id}/role`, "PUT", { role: select.value }, (r) => `${r.hostname} is a ${r.role}`);
    },
  }, "Set role"));
  return buttons;
}

function noteButtons(m) {
  return m.note.actions.map((action) => {
    const name = action.split("/").pop();
    return el("button", {
      type: "button", class: action.replace("/", "-"), title: ACTION_HELP[action] || action,
      onclick: () => act(`/v1/machines/${m.id}/${action}`, "POST", undefined,
        (r) => `${r.hostname}: ${action.replace("/", " ")}`
          + (r.drain ? `: ${r.drain.stage} (attempt ${r.drain.attempt})` : "")
          + (action === "retry" ? `: ${r.progress.item} runs again (retry ${r.retries})` : "")),
    }, name[0].toUpperCase() + name.slice(1));
  });
}

async function act(path, method, body, describe) {
  try {
    const result = await api(method, path, body);
    notify(describe(result));
    const id = path.split("/")[3];
    if (view.page.machines.some((m) => m.id === id)) view.changed.add(id);
    view.pageMayMove = pageFollowsChanges();
    changedSoon();
  } catch (error) {
    if (error instanceof Unauthorized) return showLogin(error.message);
    notify(error.message, true);
  }
}

function renderMachines() {
  const { machines: shown, total, offset } = view.page;
  $("#shown").textContent = total ? `${offset + 1}-${offset + shown.length} of ${total}` : "none match";
  $("#page-prev").disabled = offset === 0;
  $("#page-next").disabled = offset + shown.length >= total;
  for (const th of document.querySelectorAll("#machine-table th[data-sort]")) {
    const active = th.dataset.sort === view.sort.key;
    if (active) th.setAttribute("aria-sort", view.sort.dir > 0 ? "ascending" : "descending");
    else th.removeAttribute("aria-sort");
  }
  // Keep a role chosen but not yet applied when the table redraws under the user.
  const chosen = {};
  for (const row of document.querySelectorAll("#machine-table tbody tr")) {
    const select = row.querySelector("select.role");
    if (select && select.value) chosen[row.dataset.id] = select.value;
  }
  $("#machine-table tbody").replaceChildren(...shown.map((m) => {
    const step = m.step || {};
    const items = step.phase ? [el("progress", { max: Math.max(step.total, 1), value: step.done }), ` ${step.done}/${step.total}`] : ["-"];
    const row = el("tr", { "data-id": m.id, "data-hostname": m.hostname },
      el("td", { class: "hostname" }, el("button", { type: "button", class: "link", onclick: () => openDetail(m.id) }, m.hostname)),
      el("td", {}, m.ip || "-"),
      el("td", { class: "role" }, m.role || "-"),
      el("td", { class: "state" }, el("span", { class: `badge ${m.state}` }, m.state)),
      el("td", { class: "items" }, ...items),
      el("td", { class: "step", "data-running": m.step && m.step.status === "running" }, stepText(m)),
      el("td", { class: `note ${m.note.failing ? "failed" : ""}` }, ...note(m)),
      el("td", { class: "last-seen" }, clock(m.last_seen)),
      el("td", { class: "actions" }, ...actions(m)));
    const select = row.querySelector("select.role");
    if (select && chosen[m.id]) select.value = chosen[m.id];
    return row;
  }));
}

function tick() {
  if (document.hidden || !view.status) return;
  for (const cell of document.querySelectorAll("#machine-table td.step[data-running]")) {
    const m = view.page.machines.find((r) => r.id === cell.parentElement.dataset.id);
    if (m) cell.textContent = stepText(m);
  }
}

// -- one machine ----------------------------------------------------------------------------

async function openDetail(id) {
  view.detail = id;
  await renderDetail();
  $("#detail").hidden = false;
  $("#detail").scrollIntoView({ block: "nearest" });
}

async function renderDetail() {
  let machine;
  try {
    machine = await api("GET", `/v1/machines/${view.detail}`);
  } catch (error) {
    $("#detail").hidden = true;
    view.detail = null;
    return;
  }
  const history = await api("GET", `/v1/events?machine=${encodeURIComponent(machine.id)}&kind=item&order=desc&limit=100`);
  view.fetchedAt.set(machine.id, now());
  $("#detail-title").textContent = `${machine.hostname} (${machine.state})`;
  const facts = [["id", machine.id], ["cluster", machine.cluster], ["ip", machine.ip || "-"],
    ["role", machine.role || "-"], ["in state for", duration(machine.step.state_elapsed + since(machine))],
    ["step", stepText(machine)], ["note", machine.note.text || "-"], ["to do", machine.note.remedy || "-"],
    ["last seen", clock(machine.last_seen)],
    ["applied items", String(machine.applied.length)]];
  $("#detail-facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  $("#history tbody").replaceChildren(...history.map((e) => el("tr", { "data-status": e.data.status },
    el("td", {}, clock(e.time)),
    el("td", {}, `${e.data.phase}/${e.data.item}`),
    el("td", { class: e.data.status === "failed" ? "error" : "" }, e.data.status + (e.data.error ? `: ${e.data.error}` : "")),
    el("td", {}, e.data.attempt),
    el("td", {}, duration(e.data.duration)),
    el("td", {}, e.data.exit_code === null || e.data.exit_code === undefined ? "-" : e.data.exit_code))));
  const outputs = history.filter((e) => e.data.output).slice(0, 10);
  $("#output").replaceChildren(...(outputs.length ? outputs.flatMap((e) => [
    el("h4", {}, `${clock(e.time)} ${e.data.phase}/${e.data.item} attempt ${e.data.attempt} ${e.data.status}`),
    el("pre", {}, e.data.output)]) : [el("p", {}, "No output reported yet.")]));
}

// -- events -----------------------------------------------------------------------------------

const EVENTS_SHOWN = 100;

function eventQuery() {
  const query = new URLSearchParams({ order: "desc", limit: String(EVENTS_SHOWN) });
  const cluster = $("#events-cluster").value;
  const machine = $("#events-machine").value.trim();
  if (cluster) query.set("cluster", cluster);
  if (machine) query.set("machine", machine);
  return query;
}

function eventChoices() {
  // The clusters and machines to filter by follow what the coordinator has, keeping a choice.
  const select = $("#events-cluster");
  const chosen = select.value;
  select.replaceChildren(el("option", { value: "" }, "All clusters"),
    ...view.clusters.map((c) => el("option", { value: c.name, selected: c.name === chosen }, c.name)));
  const machines = view.page.machines; // the table's page: names to pick, not every machine
  $("#events-machines").replaceChildren(...machines.map((m) => el("option", { value: m.hostname })));
}

async function loadEvents() {
  eventChoices();
  const events = await api("GET", `/v1/events?${eventQuery()}`);
  $("#events-shown").textContent = events.length ? `newest ${events.length} first` : "no events match";
  $("#events-table tbody").replaceChildren(...events.map((e) => el("tr", { "data-kind": e.kind, "data-id": e.id },
    el("td", { class: "time", title: dayAndTime(e.time) }, clock(e.time)),
    el("td", { class: "cluster" }, e.cluster),
    el("td", { class: "machine" }, e.hostname || "-"),
    el("td", { class: "kind" }, e.kind),
    el("td", { class: "message" }, e.message))));
}

const eventsSoon = soon(loadEvents); // a filter typed in
const eventsFollow = soon(loadEvents, FOLLOW_MS); // live: one reload for a burst of events

// -- wiring -----------------------------------------------------------------------------------

function init() {
  for (const state of STATES) $("#filter-state").append(el("option", { value: state }, state));
  const firstPage = () => { view.page.offset = 0; pageSoon(); };
  for (const input of ["#search", "#filter-state", "#filter-role", "#filter-responding", "#filter-label"]) {
    $(input).addEventListener("input", firstPage);
  }
  for (const th of document.querySelectorAll("#machine-table th[data-sort]")) {
    th.querySelector("button").addEventListener("click", () => {
      const key = th.dataset.sort;
      view.sort = { key, dir: view.sort.key === key ? -view.sort.dir : 1 };
      firstPage();
    });
  }
  $("#page-prev").addEventListener("click", () => {
    view.page.offset = Math.max(0, view.page.offset - PAGE_SIZE);
    pageSoon();
  });
  $("#page-next").addEventListener("click", () => { view.page.offset += PAGE_SIZE; pageSoon(); });
  for (const input of ["#events-cluster", "#events-machine"]) $(input).addEventListener("input", eventsSoon);
  $("#login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim());
    $("#token").value = "";
    start();
  });
  $("#forget").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); showLogin(); });
  $("#plan-load").addEventListener("click", loadPlan);
  $("#detail-close").addEventListener("click", () => { view.detail = null; $("#detail").hidden = true; });
  document.addEventListener("visibilitychange", caughtUp);
  setInterval(tick, 1000); // elapsed times move on in the browser: no request

  if (sessionStorage.getItem(TOKEN_KEY)) start();
  else showLogin();
}

init();
