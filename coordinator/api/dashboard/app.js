// The coordinator's dashboard: plain DOM code, no build step. Everything it shows comes from
// the admin API with the token kept in sessionStorage; a server-sent event stream (read with
// fetch, so it can carry the token) triggers a refresh whenever the coordinator records anything.
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

const clock = (t) => (t ? new Date(t * 1000).toLocaleTimeString() : "-");

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

async function refresh() {
  view.clusters = await api("GET", "/v1/clusters");
  if (!view.clusters.some((c) => c.name === view.cluster)) {
    view.cluster = view.clusters.length ? view.clusters[0].name : null;
  }
  view.status = view.cluster ? await api("GET", `/v1/clusters/${encodeURIComponent(view.cluster)}/status`) : null;
  render();
  if (view.detail) await renderDetail();
}

let pending = null;
function refreshSoon() {
  // Many events arrive together during a rollout: one refresh for a burst.
  if (pending) return;
  pending = setTimeout(async () => {
    pending = null;
    try {
      await refresh();
    } catch (error) {
      if (error instanceof Unauthorized) showLogin(error.message);
    }
  }, 150);
}

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
      refreshSoon(); // whatever happened while the stream was down
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

function onEvent(event) {
  if (!view.cluster || event.cluster === view.cluster || event.kind.startsWith("cluster")) refreshSoon();
}

// -- rendering --------------------------------------------------------------------------

function render() {
  renderClusters();
  const status = view.status;
  $("#overview").hidden = !status;
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
  const eta = rollout.eta_seconds === null ? "estimating" : rollout.eta_seconds === 0 ? "done" : duration(rollout.eta_seconds);
  $("#rollout-text").textContent = `${rollout.done}/${rollout.total} items on ${rollout.machines} machine${rollout.machines === 1 ? "" : "s"} · ETA ${eta}`;
  $("#stages").replaceChildren(...status.stages.map((stage) => el("li", { "data-stage": stage.name, "data-state": stage.state },
    el("span", { class: `mark state-${stage.state}` }, MARKS[stage.state]),
    el("span", {}, el("strong", {}, stage.title), " ", el("span", { class: `state state-${stage.state}` }, stage.state)),
    el("span", { class: "since", title: "entered this state" }, clock(stage.since)),
    el("span", { class: "message" }, stage.message))));
  renderMachines();
}

function renderClusters() {
  $("#clusters").replaceChildren(...view.clusters.map((c) => el("button", {
    type: "button", "aria-pressed": String(c.name === view.cluster),
    onclick: () => { view.cluster = c.name; view.detail = null; $("#detail").hidden = true; refresh(); },
  }, `${c.name} · ${c.release}${c.deleting ? " (deleting)" : ""}`)));
}

function sortValue(m, key) {
  if (key === "items") return m.step && m.step.total ? m.step.done / m.step.total : -1;
  if (key === "state") return STATES.indexOf(m.state);
  return m[key] === null || m[key] === undefined ? "" : m[key];
}

function visibleMachines() {
  const text = $("#search").value.trim().toLowerCase();
  const state = $("#filter-state").value;
  const role = $("#filter-role").value;
  const { key, dir } = view.sort;
  return view.status.machines
    .filter((m) => !text || [m.hostname, m.ip || "", m.id].some((v) => v.toLowerCase().includes(text)))
    .filter((m) => !state || m.state === state)
    .filter((m) => !role || (role === "none" ? !m.role : m.role === role))
    .sort((a, b) => {
      const x = sortValue(a, key), y = sortValue(b, key);
      return (x < y ? -1 : x > y ? 1 : a.hostname.localeCompare(b.hostname)) * dir;
    });
}

function note(m) {
  const step = m.step || {};
  let text = "";
  if (m.precheck_failures.length) text = `prechecks failed: ${m.precheck_failures.join("; ")}`;
  else if (m.state === "Pending" && !m.approved) text = "waiting for approval";
  else if (m.state === "Pending" && !m.role) text = "approved; waiting for a role";
  else if (step.node) {
    text = (step.status === "failed" ? `failing for ${duration(step.failing_for)}: ` : "")
      + `${step.node} (${duration(step.node_waiting)})`;
  } else if (step.gave_up) {
    text = `gave up after ${step.attempt} attempt${step.attempt === 1 ? "" : "s"} (failing for ${duration(step.failing_for)}): ${step.error}`
      + `; fix the cause, then retry (coordinator machines retry ${m.hostname})`;
  } else if (step.status === "failed") {
    text = `failing for ${duration(step.failing_for)}`
      + (step.next_retry_in !== null ? `, retry in ${duration(step.next_retry_in)}` : "") + `: ${step.error}`;
  } else if (step.status === "done" && m.state === "Prepare") text = "prepared; waiting for a deploy slot";
  return (m.responding ? "" : "NOT RESPONDING ") + text;
}

function stepText(m) {
  const step = m.step || {};
  if (!step.item) return "-";
  if (step.status === "waiting") return `${step.index}/${step.total} ${step.item} (next)`;
  const elapsed = step.status === "running" ? `, ${duration(step.item_elapsed)}` : "";
  return `${step.index}/${step.total} ${step.item} (attempt ${step.attempt}${elapsed})`;
}

function roleSelect(m) {
  const select = el("select", { "aria-label": `Role for ${m.hostname}`, class: "role" },
    el("option", { value: "" }, "role…"),
    ...["manager", "worker"].map((r) => el("option", { value: r, selected: m.role === r }, r)));
  return select;
}

function retryButton(m) {
  return el("button", {
    type: "button", class: "retry", title: "run the item its agent gave up on again, with a fresh attempt budget",
    onclick: () => act(`/v1/machines/${m.id}/retry`, "POST", undefined,
      (r) => `${r.hostname}: ${r.progress.item} runs again (retry ${r.retries})`),
  }, "Retry");
}

function actions(m) {
  if (m.step && m.step.gave_up) return view.role === "admin" ? [retryButton(m)] : [];
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

async function act(path, method, body, describe) {
  try {
    const result = await api(method, path, body);
    notify(describe(result));
    refreshSoon();
  } catch (error) {
    if (error instanceof Unauthorized) return showLogin(error.message);
    notify(error.message, true);
  }
}

function renderMachines() {
  const shown = visibleMachines();
  $("#shown").textContent = `${shown.length} of ${view.status.machines.length} shown`;
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
      el("td", { class: "step" }, stepText(m)),
      el("td", { class: `note ${step.status === "failed" || m.precheck_failures.length ? "failed" : ""}` }, note(m)),
      el("td", {}, clock(m.last_seen)),
      el("td", { class: "actions" }, ...actions(m)));
    const select = row.querySelector("select.role");
    if (select && chosen[m.id]) select.value = chosen[m.id];
    return row;
  }));
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
  $("#detail-title").textContent = `${machine.hostname} (${machine.state})`;
  const facts = [["id", machine.id], ["cluster", machine.cluster], ["ip", machine.ip || "-"],
    ["role", machine.role || "-"], ["in state for", duration(machine.step.state_elapsed)],
    ["step", stepText(machine)], ["last seen", clock(machine.last_seen)],
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

// -- wiring -----------------------------------------------------------------------------------

function init() {
  for (const state of STATES) $("#filter-state").append(el("option", { value: state }, state));
  for (const input of ["#search", "#filter-state", "#filter-role"]) {
    $(input).addEventListener("input", () => view.status && renderMachines());
  }
  for (const th of document.querySelectorAll("#machine-table th[data-sort]")) {
    th.querySelector("button").addEventListener("click", () => {
      const key = th.dataset.sort;
      view.sort = { key, dir: view.sort.key === key ? -view.sort.dir : 1 };
      renderMachines();
    });
  }
  $("#login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim());
    $("#token").value = "";
    start();
  });
  $("#forget").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); showLogin(); });
  $("#detail-close").addEventListener("click", () => { view.detail = null; $("#detail").hidden = true; });
  setInterval(() => view.status && !document.hidden && refreshSoon(), 5000); // elapsed times move on
  if (sessionStorage.getItem(TOKEN_KEY)) start();
  else showLogin();
}

init();
