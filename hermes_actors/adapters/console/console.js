// The operator console of hermes_actors (served at /console; plain JavaScript, no build step,
// nothing loaded from elsewhere).
//
// The admin token comes from the sign-in form or from a "#token=..." fragment (read here,
// never sent in a URL: the fragment is removed from the address bar at once). It is kept in
// sessionStorage (this tab only) and sent only as "Authorization: Bearer". Without it the
// page requests nothing.
//
// Live data comes from GET /v1/admin/events, a Server-Sent Events stream of the operator
// routes' answers ("sessions", "deliveries", "cluster"), each sent again when it changes.
// EventSource cannot send an Authorization header, so streams are read with fetch() and a
// stream reader. Every value shown is set as text, never as HTML.
"use strict";

(() => {
  const ADMIN_KEY = "hermes_actors.admin_token";
  const INGRESS_KEY = "hermes_actors.ingress_token";
  const SESSION_LIMIT = 200;
  const RETRY_FIRST_MS = 500;
  const RETRY_MAX_MS = 10000;

  const $ = (id) => document.getElementById(id);

  class HttpError extends Error {
    constructor(status, message) {
      super(`${status}: ${message}`);
      this.status = status;
    }
  }

  // -- small helpers ------------------------------------------------------------------------

  /** An element with text content and attributes (never innerHTML). */
  function el(tag, props = {}, children = []) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props)) {
      if (value === undefined || value === null) continue;
      if (name === "text") node.textContent = String(value);
      else if (name === "className") node.className = value;
      else if (name === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(name, String(value));
    }
    for (const child of children) node.append(child);
    return node;
  }

  function show(value) {
    if (value === null || value === undefined) return "";
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function when(iso) {
    if (!iso) return "";
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
  }

  /** Resolves after ms milliseconds, or at once when signal aborts. */
  function pause(ms, signal) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
    });
  }

  function notice(text, isError = false) {
    const box = $("notice");
    box.textContent = text;
    box.classList.toggle("error", isError);
  }

  function setStatus(state, text) {
    const status = $("conn-status");
    status.dataset.state = state;
    status.textContent = text;
  }

  // -- tokens -------------------------------------------------------------------------------

  function adminToken() {
    return sessionStorage.getItem(ADMIN_KEY) || "";
  }

  /** Move a "#token=..." fragment into sessionStorage and out of the address bar. */
  function takeFragmentToken() {
    if (!location.hash || location.hash.length < 2) return;
    const params = new URLSearchParams(location.hash.slice(1));
    if (!params.has("token")) return;
    const token = params.get("token");
    params.delete("token");
    const rest = params.toString();
    history.replaceState(history.state, "",
      location.pathname + location.search + (rest ? `#${rest}` : ""));
    if (token) sessionStorage.setItem(ADMIN_KEY, token);
  }

  // -- HTTP ---------------------------------------------------------------------------------

  async function request(method, path, { token = adminToken(), body } = {}) {
    const headers = { Authorization: `Bearer ${token}` };
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (_) {
      data = null;
    }
    if (!response.ok) {
      throw new HttpError(response.status, (data && data.error) || response.statusText);
    }
    return data;
  }

  /**
   * Read the Server-Sent Events at path (with the bearer token) until the stream ends;
   * onEvent({type, data, id}) for each event, type "open" for one with an id and no data.
   */
  async function readEvents(path, token, onEvent, signal) {
    const response = await fetch(path, {
      headers: { Authorization: `Bearer ${token}`, Accept: "text/event-stream" },
      cache: "no-store",
      signal,
    });
    if (!response.ok) {
      let message = response.statusText;
      try {
        message = (await response.json()).error || message;
      } catch (_) { /* not JSON: the status text */ }
      throw new HttpError(response.status, message);
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let type = "message";
    let data = [];
    let id = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n")) >= 0) {
        let line = buffer.slice(0, end);
        buffer = buffer.slice(end + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          if (data.length) onEvent({ type, data: data.join("\n"), id });
          else if (id !== null) onEvent({ type: "open", data: "", id });
          type = "message";
          data = [];
          id = null;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let fieldValue = colon < 0 ? "" : line.slice(colon + 1);
        if (fieldValue.startsWith(" ")) fieldValue = fieldValue.slice(1);
        if (field === "event") type = fieldValue;
        else if (field === "data") data.push(fieldValue);
        else if (field === "id") id = fieldValue;
      }
    }
  }

  function sessionPath(key) {
    return `/v1/admin/sessions/${encodeURIComponent(key)}`;
  }

  // -- signing in and out -------------------------------------------------------------------

  let live = null; // the AbortController of the admin event stream

  function signIn() {
    $("login").hidden = true;
    $("app").hidden = false;
    $("logout").hidden = false;
    $("chat-token").value = sessionStorage.getItem(INGRESS_KEY) || "";
    followAdminEvents();
  }

  function signOut(message = "") {
    if (live) live.abort();
    live = null;
    closeChat();
    sessionStorage.removeItem(ADMIN_KEY);
    selected = null;
    lastSessions = new Map();
    for (const id of ["sessions", "deliveries", "ledger"]) {
      $(id).querySelector("tbody").replaceChildren();
    }
    for (const id of ["transcript", "inbox", "chat-log", "cluster", "detail-fields"]) {
      $(id).replaceChildren();
    }
    $("detail").hidden = true;
    $("cluster-panel").hidden = true;
    $("app").hidden = true;
    $("logout").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message;
    notice("");
    setStatus("off", "signed out");
  }

  // -- the live views -----------------------------------------------------------------------

  async function followAdminEvents() {
    const controller = new AbortController();
    live = controller;
    let delay = RETRY_FIRST_MS;
    while (!controller.signal.aborted) {
      setStatus("connecting", "connecting…");
      try {
        await readEvents(`/v1/admin/events?limit=${SESSION_LIMIT}`, adminToken(), (event) => {
          if (controller.signal.aborted) return;
          delay = RETRY_FIRST_MS;
          setStatus("live", "live");
          onAdminEvent(event);
        }, controller.signal);
      } catch (error) {
        if (controller.signal.aborted) return;
        if (error instanceof HttpError && (error.status === 401 || error.status === 404)) {
          signOut(error.status === 401
            ? "The gateway refused this admin token (401)."
            : "The operator routes are off on this gateway (404).");
          return;
        }
      }
      if (controller.signal.aborted) return;
      setStatus("error", "disconnected, reconnecting…");
      await pause(delay, controller.signal);
      delay = Math.min(delay * 2, RETRY_MAX_MS);
    }
  }

  function onAdminEvent(event) {
    let data;
    try {
      data = JSON.parse(event.data);
    } catch (_) {
      return;
    }
    if (event.type === "sessions") renderSessions(data.sessions || []);
    else if (event.type === "deliveries") renderDeliveries(data.deliveries || []);
    else if (event.type === "cluster") renderCluster(data);
  }

  // -- sessions -----------------------------------------------------------------------------

  let selected = null; // the session key shown in the detail panel
  let lastSessions = new Map(); // session key -> its row's JSON, as last rendered
  let detailSeq = 0;

  function stateBadges(session) {
    const badges = [];
    for (const state of ["running", "suspended", "resume_pending"]) {
      if (session[state]) badges.push(el("span", { className: `badge ${state}`, text: state.replace("_", " ") }));
    }
    if (!badges.length) badges.push(el("span", { className: "badge", text: "idle" }));
    return badges;
  }

  function renderSessions(sessions) {
    const body = $("sessions").querySelector("tbody");
    const seen = new Map();
    const rows = sessions.map((session) => {
      seen.set(session.session_key, JSON.stringify(session));
      const chat = session.thread_id ? `${show(session.chat_id)} / ${session.thread_id}` : show(session.chat_id);
      const row = el("tr", {
        dataset: { sessionKey: session.session_key, running: String(Boolean(session.running)) },
        tabindex: "0",
        className: session.session_key === selected ? "selected" : undefined,
      }, [
        el("td", {}, [el("code", { text: session.session_key })]),
        el("td", { text: show(session.platform) }),
        el("td", { text: chat }),
        el("td", {}, stateBadges(session)),
        el("td", { text: show(session.queue_depth) }),
        el("td", { text: when(session.updated_at), title: show(session.updated_at) }),
      ]);
      return row;
    });
    body.replaceChildren(...rows);
    $("session-count").textContent = `(${sessions.length})`;
    $("sessions-empty").hidden = sessions.length > 0;
    if (selected !== null && seen.get(selected) !== lastSessions.get(selected)) {
      if (seen.has(selected)) loadDetail(selected);
    }
    lastSessions = seen;
  }

  function select(key) {
    selected = key;
    for (const row of $("sessions").querySelectorAll("tbody tr")) {
      row.classList.toggle("selected", row.dataset.sessionKey === key);
    }
    loadDetail(key);
  }

  async function loadDetail(key) {
    const seq = ++detailSeq;
    try {
      const detail = await request("GET", sessionPath(key));
      if (seq === detailSeq && selected === key) renderDetail(detail);
    } catch (error) {
      if (seq !== detailSeq) return;
      if (error instanceof HttpError && error.status === 404) {
        $("detail").hidden = true;
        selected = null;
      }
      notice(`Could not load session ${key}: ${error.message}`, true);
    }
  }

  function renderDetail(detail) {
    $("detail").hidden = false;
    $("detail-key").textContent = detail.session_key;
    const fields = ["session_id", "platform", "chat_id", "thread_id", "queue_depth", "updated_at"];
    const items = [];
    for (const name of fields) {
      items.push(el("dt", { text: name }), el("dd", { text: show(detail[name]) }));
    }
    items.push(el("dt", { text: "state" }), el("dd", {}, stateBadges(detail)));
    $("detail-fields").replaceChildren(...items);
    $("detail").dataset.running = String(Boolean(detail.running));

    $("transcript").replaceChildren(...(detail.transcript_tail || []).map((message) =>
      el("li", { className: show(message.role) }, [
        el("span", { className: "who", text: show(message.role) }),
        show(message.content),
      ])));
    $("inbox").replaceChildren(...(detail.inbox || []).map((event) =>
      el("li", { className: "user" }, [
        el("span", { className: "who", text: show(event.event_id) }),
        show(event.text),
      ])));
    $("ledger").querySelector("tbody").replaceChildren(...(detail.deliveries || []).map((row) =>
      el("tr", {}, [
        el("td", {}, [el("code", { text: show(row.obligation_id) })]),
        el("td", { text: show(row.state) }),
        el("td", { text: show(row.attempts) }),
        el("td", { className: "text", text: show(row.content) }),
        el("td", { className: "text", text: show(row.last_error) }),
      ])));
  }

  const ACTIONS = {
    cancel: { method: "POST", done: (data) => `cancel submitted (event ${data.event_id})` },
    reset: { method: "POST", done: (data) => `reset submitted (event ${data.event_id})` },
    unsuspend: { method: "POST", done: () => "no longer suspended" },
    delete: { method: "DELETE", done: () => "deleted" },
  };

  async function act(action) {
    const key = selected;
    const spec = ACTIONS[action];
    if (key === null || !spec) return;
    if (action === "delete" && !window.confirm(
      `Delete the conversation ${key}?\n\nIts transcript, inbox, outbox and deliveries are removed for good.`)) {
      return;
    }
    const path = action === "delete" ? sessionPath(key) : `${sessionPath(key)}/${action}`;
    try {
      const data = await request(spec.method, path);
      notice(`${key}: ${spec.done(data || {})}`);
      if (action === "delete") {
        selected = null;
        $("detail").hidden = true;
      } else {
        loadDetail(key);
      }
    } catch (error) {
      notice(`${action} ${key} failed: ${error.message}`, true);
    }
  }

  // -- deliveries ---------------------------------------------------------------------------

  function renderDeliveries(rows) {
    $("deliveries").querySelector("tbody").replaceChildren(...rows.map((row) =>
      el("tr", { dataset: { obligationId: show(row.obligation_id) } }, [
        el("td", {}, [el("code", { text: show(row.obligation_id) })]),
        el("td", { text: show(row.session_key) }),
        el("td", { text: show(row.state) }),
        el("td", { text: show(row.attempts) }),
        el("td", { className: "text", text: show(row.content) }),
        el("td", { className: "text", text: show(row.last_error) }),
        el("td", {}, [el("button", { type: "button", text: "Retry", dataset: { retry: show(row.obligation_id) } })]),
      ])));
    $("delivery-count").textContent = `(${rows.length})`;
    $("deliveries-empty").hidden = rows.length > 0;
  }

  async function retry(obligationId) {
    try {
      const data = await request("POST", `/v1/admin/deliveries/${encodeURIComponent(obligationId)}/retry`);
      notice(`delivery ${obligationId} is pending again (was ${data.was}); the next ledger sweep sends it`);
    } catch (error) {
      notice(`retry ${obligationId} failed: ${error.message}`, true);
    }
  }

  // -- cluster ------------------------------------------------------------------------------

  /** The cluster route's answer, whatever its shape: lists of records as tables. */
  function renderCluster(data) {
    const parts = [];
    const scalars = [];
    for (const [name, value] of Object.entries(data || {})) {
      if (Array.isArray(value) && value.every((item) => item && typeof item === "object")) {
        const columns = [...new Set(value.flatMap((item) => Object.keys(item)))];
        parts.push(el("h3", { text: `${name} (${value.length})` }), el("table", { dataset: { view: name } }, [
          el("thead", {}, [el("tr", {}, columns.map((column) => el("th", { text: column })))]),
          el("tbody", {}, value.map((item) =>
            el("tr", {}, columns.map((column) => el("td", { text: show(item[column]) }))))),
        ]));
      } else {
        scalars.push(el("dt", { text: name }), el("dd", { text: show(value) }));
      }
    }
    if (scalars.length) parts.unshift(el("dl", {}, scalars));
    $("cluster").replaceChildren(...parts);
    $("cluster-panel").hidden = false;
  }

  // -- the test chat (the ingress API, with the ingress token) ------------------------------

  let chat = null; // {platform, chatId, token, controller, ready}

  function closeChat() {
    if (chat) chat.controller.abort();
    chat = null;
  }

  function chatLine(kind, who, text) {
    const log = $("chat-log");
    log.append(el("li", { className: kind }, [el("span", { className: "who", text: who }), text]));
    log.lastElementChild.scrollIntoView({ block: "nearest" });
  }

  /** The open reply stream of the conversation; resolves once it is open (its cursor set). */
  function openChat(platform, chatId, token) {
    if (chat && chat.platform === platform && chat.chatId === chatId && chat.token === token) {
      return chat.ready;
    }
    closeChat();
    const controller = new AbortController();
    let opened;
    let failed;
    const ready = new Promise((resolve, reject) => { opened = resolve; failed = reject; });
    ready.catch(() => {}); // (the sender sees the failure; nothing is left unhandled)
    const current = { platform, chatId, token, controller, ready };
    chat = current;
    (async () => {
      let cursor = "latest";
      let delay = RETRY_FIRST_MS;
      while (!controller.signal.aborted) {
        const query = new URLSearchParams({ platform, chat_id: chatId, after: cursor });
        try {
          await readEvents(`/v1/stream?${query}`, token, (event) => {
            if (event.id !== null) cursor = event.id;
            delay = RETRY_FIRST_MS;
            if (event.type === "open") {
              opened();
            } else if (event.type === "message") {
              const message = JSON.parse(event.data);
              chatLine(message.kind, message.final ? message.kind : `${message.kind} (more to come)`, message.text);
            }
          }, controller.signal);
        } catch (error) {
          if (controller.signal.aborted) return;
          failed(error);
          if (error instanceof HttpError && error.status < 500) {
            chatLine("notice", "error", `the reply stream was refused: ${error.message}`);
            if (chat === current) chat = null;
            return;
          }
        }
        await pause(delay, controller.signal);
        delay = Math.min(delay * 2, RETRY_MAX_MS);
      }
    })();
    return ready;
  }

  async function sendChat(event) {
    event.preventDefault();
    const token = $("chat-token").value;
    const platform = $("chat-platform").value.trim() || "webhook";
    const chatId = $("chat-id").value.trim();
    const text = $("chat-text").value;
    if (!token || !chatId || !text) {
      chatLine("notice", "error", "an ingress token, a chat id and a message are needed");
      return;
    }
    sessionStorage.setItem(INGRESS_KEY, token);
    try {
      await openChat(platform, chatId, token);
      const data = await request("POST", "/v1/messages", {
        token, body: { platform, chat_id: chatId, text },
      });
      $("chat-text").value = "";
      chatLine("user", `you (event ${data.event_id})`, text);
    } catch (error) {
      chatLine("notice", "error", `not sent: ${error.message}`);
    }
  }

  // -- start --------------------------------------------------------------------------------

  function start() {
    $("login").addEventListener("submit", (event) => {
      event.preventDefault();
      const token = $("token-input").value.trim();
      $("token-input").value = "";
      if (!token) return;
      sessionStorage.setItem(ADMIN_KEY, token);
      signIn();
    });
    $("logout").addEventListener("click", () => signOut());
    $("sessions").querySelector("tbody").addEventListener("click", (event) => {
      const row = event.target.closest("tr[data-session-key]");
      if (row) select(row.dataset.sessionKey);
    });
    $("sessions").querySelector("tbody").addEventListener("keydown", (event) => {
      const row = event.target.closest("tr[data-session-key]");
      if (row && (event.key === "Enter" || event.key === " ")) {
        event.preventDefault();
        select(row.dataset.sessionKey);
      }
    });
    $("detail").addEventListener("click", (event) => {
      const button = event.target.closest("button[data-action]");
      if (button) act(button.dataset.action);
    });
    $("deliveries").addEventListener("click", (event) => {
      const button = event.target.closest("button[data-retry]");
      if (button) retry(button.dataset.retry);
    });
    $("chat-form").addEventListener("submit", sendChat);
    window.addEventListener("hashchange", () => {
      const before = adminToken();
      takeFragmentToken();
      if (adminToken() && adminToken() !== before) { // a new token pasted into the address
        if (live) live.abort();
        signIn();
      }
    });

    takeFragmentToken();
    if (adminToken()) signIn();
    else signOut();
  }

  start();
})();
