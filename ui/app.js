// The idemproxy admin page. Everything it shows comes from the admin API on this
// listener, each call carrying the admin token in an Authorization header. The token
// lives in this closure only: never in a cookie, storage or a URL. Keys, scopes and
// bodies reach the page as data and are only ever set as text (textContent), never
// parsed as HTML.
"use strict";

(() => {
  let token = "";
  let timer = null;
  let ticks = 0;
  // Counters come from the proxy's memory, every 2 s. The record lists read the store
  // (the in-flight one scans the table), so they refresh every 10 s, after each
  // action, and on the Refresh button.
  const RECORDS_EVERY = 5;
  const $ = (id) => document.getElementById(id);

  class Unauthorized extends Error {}

  async function api(method, path) {
    const response = await fetch(path, {
      method,
      headers: { Authorization: "Bearer " + token, Accept: "application/json" },
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    });
    if (response.status === 401 || response.status === 403) {
      const problem = await response.json().catch(() => ({}));
      throw new Unauthorized(problem.detail || response.statusText);
    }
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      const error = new Error(body.detail || body.error || response.statusText);
      error.status = response.status;
      throw error;
    }
    return body;
  }

  function element(tag, text, className) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (className) e.className = className;
    return e;
  }

  function fillTable(table, columns, rows) {
    const head = table.tHead;
    const body = table.tBodies[0];
    head.replaceChildren();
    body.replaceChildren();
    const tr = element("tr");
    for (const c of columns) tr.append(element("th", c));
    head.append(tr);
    for (const cells of rows) {
      const row = element("tr");
      for (const cell of cells) {
        const td = element("td");
        if (cell instanceof Node) td.append(cell); else td.textContent = cell ?? "";
        row.append(td);
      }
      body.append(row);
    }
    if (rows.length === 0) {
      const row = element("tr");
      const td = element("td", "none", "empty");
      td.colSpan = columns.length;
      row.append(td);
      body.append(row);
    }
  }

  function signedOut(message) {
    token = "";
    clearInterval(timer);
    timer = null;
    $("main").hidden = true;
    $("login").hidden = false;
    $("logout").hidden = true;
    $("status").textContent = "not connected";
    $("login-error").textContent = message || "";
  }

  // Every failed call ends here: a refused token signs out, anything else is shown.
  function failed(error, where) {
    if (error instanceof Unauthorized) {
      signedOut("The admin API refused the token: " + error.message);
    } else {
      where.textContent = error.message;
    }
  }

  // Outcome counters: one row per route, one column per outcome seen.
  const OUTCOME_ORDER = ["executed", "replayed", "mismatch", "conflict", "missing_key",
    "bad_key", "expired", "store_unavailable", "fail_open", "indeterminate", "outcome_unknown",
    "released", "passthrough", "upstream_error", "too_large"];

  async function refreshStats() {
    const stats = await api("GET", "/admin/stats");
    const byRoute = new Map();
    const seen = new Set();
    for (const r of stats.requests) {
      if (!byRoute.has(r.route)) byRoute.set(r.route, new Map());
      byRoute.get(r.route).set(r.outcome, r.count);
      seen.add(r.outcome);
    }
    for (const name of stats.routes) if (!byRoute.has(name)) byRoute.set(name, new Map());
    const outcomes = [...OUTCOME_ORDER.filter((o) => seen.has(o)),
      ...[...seen].filter((o) => !OUTCOME_ORDER.includes(o)).sort()];
    const routes = [...byRoute.keys()].sort();
    fillTable($("outcomes"), ["route", ...outcomes],
      routes.map((route) => [route, ...outcomes.map((o) => byRoute.get(route).get(o) ?? 0)]));
    for (const [i, route] of routes.entries()) {
      $("outcomes").tBodies[0].rows[i]?.setAttribute("data-route", route);
    }
    const figures = $("figures");
    figures.replaceChildren();
    const figure = (label, value, id) => {
      const box = element("div", null, "figure");
      const v = element("span", value ?? "-", "value");
      v.id = id;
      box.append(v, element("span", label, "label"));
      figures.append(box);
    };
    figure("claims in flight here", stats.claims_in_flight, "fig-in-flight");
    figure("indeterminate records", stats.records_indeterminate, "fig-indeterminate");
    figure("lease takeovers", stats.lease_takeovers, "fig-takeovers");
    figure("store errors", stats.store_errors, "fig-store-errors");
    figure("replay-cache hits", stats.replay_cache_hits, "fig-cache-hits");
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  }

  function recordButtons(record) {
    const cell = element("span", null, "actions");
    const resolve = element("button", "Resolve");
    resolve.type = "button";
    resolve.dataset.action = "resolve";
    resolve.dataset.key = record.key;
    resolve.title = "Mark released: the next request with this key executes";
    const purge = element("button", "Purge", "danger");
    purge.type = "button";
    purge.dataset.action = "purge";
    purge.dataset.key = record.key;
    purge.title = "Delete the record: the next request with this key executes";
    for (const b of [resolve, purge]) {
      b.addEventListener("click", () => act(b.dataset.action, record));
    }
    cell.append(resolve, purge);
    return cell;
  }

  async function act(action, record) {
    const what = action === "resolve" ? "Resolve" : "Purge";
    if (!window.confirm(`${what} key "${record.key}" (scope "${record.scope}")? ` +
        "The next request with this key executes again.")) {
      return;
    }
    const path = `/admin/keys/${encodeURIComponent(record.key)}` +
      (action === "resolve" ? "/resolve" : "") + `?scope=${encodeURIComponent(record.scope)}`;
    try {
      await api(action === "resolve" ? "POST" : "DELETE", path);
      $("records-error").textContent = `${what}d "${record.key}".`;
      await refreshRecords();
    } catch (error) {
      failed(error, $("records-error"));
    }
  }

  async function refreshRecords() {
    const columns = ["key", "scope", "route", "method", "target", "created", "token", "lease until", ""];
    for (const [state, table] of [["indeterminate", "indeterminate"], ["in_flight", "in-flight"]]) {
      const listed = await api("GET", `/admin/keys?state=${state}&limit=50`);
      fillTable($(table), columns, listed.records.map((r) => [
        r.key, r.scope, r.route, r.method, r.target, r.created_at, r.fencing_token,
        (r.locked_until || "") + (r.stale ? " (stale)" : ""), recordButtons(r)]));
    }
  }

  async function lookup(event) {
    event.preventDefault();
    const out = $("record");
    out.replaceChildren();
    const key = $("lookup-key").value;
    if (!key) return;
    const scope = $("lookup-scope").value;
    const body = $("lookup-body").checked ? "&body=1" : "";
    try {
      const r = await api("GET",
        `/admin/keys/${encodeURIComponent(key)}?scope=${encodeURIComponent(scope)}${body}`);
      const rows = [["state", r.state + (r.stale ? " (stale)" : "") + (r.expired ? " (expired)" : "")],
        ["status", r.response ? r.response.status : "-"],
        ["route", r.route], ["request", `${r.method} ${r.target}`],
        ["fencing token", r.fencing_token], ["created", r.created_at],
        ["lease until", r.locked_until || "-"], ["expires", r.expires_at],
        ["sealed", r.sealed ? "yes (store.encryption)" : "no"]];
      if (r.response?.trace_id) rows.push(["trace", r.response.trace_id]);
      const table = element("table", null, "record");
      table.createTHead();
      table.createTBody();
      fillTable(table, ["field", "value"], rows);
      table.id = "record-fields";
      out.append(table);
      if ($("lookup-body").checked) {
        const text = r.response?.body ?? r.response?.body_base64 ?? r.body_withheld ?? "";
        const pre = element("pre", text, "body");
        pre.id = "record-body";
        out.append(element("h3", r.response?.body_base64 ? "Stored body (base64)" : "Stored body"), pre);
      }
      if (["indeterminate", "in_flight"].includes(r.state)) out.append(recordButtons(r));
    } catch (error) {
      const p = element("p", null, "error");
      out.append(p);
      failed(error, p);
    }
  }

  async function showPolicy() {
    const policy = await api("GET", "/admin/policy");
    $("policy-json").textContent = JSON.stringify(policy, null, 2);
    fillTable($("policy"), ["route", "prefix", "methods", "mode", "key", "ttl", "on concurrent"],
      policy.routes.map((r) => [r.name, r.path_prefix, r.methods.join(", "), r.mode,
        r.key.header + (r.key.json_pointer ? ", else body " + r.key.json_pointer : "") +
          (r.key.required ? " (required)" : " (optional)"),
        r.expiry.ttl, String(r.on_concurrent).split(":")[0]]));
  }

  async function refresh() {
    try {
      await refreshStats();
      if (ticks++ % RECORDS_EVERY === 0) await refreshRecords();
      $("status").textContent = "connected";
    } catch (error) {
      failed(error, $("records-error"));
    }
  }

  async function connect(event) {
    event.preventDefault();
    token = $("token").value;
    $("token").value = "";
    if (!token) return;
    try {
      await refreshStats();
    } catch (error) {
      signedOut(error instanceof Unauthorized
        ? "The admin API refused the token: " + error.message : error.message);
      return;
    }
    $("login").hidden = true;
    $("main").hidden = false;
    $("logout").hidden = false;
    $("login-error").textContent = "";
    ticks = 0;
    await refresh();
    await showPolicy().catch((error) => failed(error, $("policy-json")));
    timer = setInterval(refresh, 2000);
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("login-form").addEventListener("submit", connect);
    $("lookup-form").addEventListener("submit", lookup);
    $("logout").addEventListener("click", () => signedOut(""));
    $("refresh-records").addEventListener("click", () =>
      refreshRecords().catch((error) => failed(error, $("records-error"))));
  });
})();
