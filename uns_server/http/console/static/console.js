// UNS operator console: small progressive enhancement, no library.
// Every page works without it; with it: times in the viewer's zone, a confirmation
// dialog before actions, and live updates over Server-Sent Events.
"use strict";

(function () {
  const fmt = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
  });

  function localTime(el) {
    const iso = el.getAttribute("datetime");
    const d = new Date(iso);
    if (!isNaN(d)) {
      if (!el.title) el.title = d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
      el.textContent = fmt.format(d);
    }
  }

  function timeElement(iso) {
    const t = document.createElement("time");
    t.setAttribute("datetime", iso);
    t.title = new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
    localTime(t);
    return t;
  }

  document.querySelectorAll("time[datetime]").forEach(localTime);

  // Events after which a notification's fields and actions on the page are out of date.
  const CHANGES_STATE = new Set([
    "DELIVERY_RESULT", "REPLAY_REQUESTED", "FAILURE_RESOLVED", "ACKED", "DISMISSED",
    "TIMED_OUT", "DEDUP_SATISFIED", "OBLIGATION_HANDED_OFF",
  ]);

  // Actions ask once more before they change anything.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (ev) {
      if (!window.confirm(form.getAttribute("data-confirm"))) ev.preventDefault();
    });
  });

  // Live: the overview's tail (newest first) and a notification's timeline (appended).
  document.querySelectorAll("[data-sse]").forEach(function (target) {
    if (!window.EventSource) return;
    const status = document.getElementById("tail-status");
    const max = parseInt(target.getAttribute("data-max") || "0", 10);
    const append = target.getAttribute("data-order") === "append";
    const source = new EventSource(target.getAttribute("data-sse"));
    const seen = new Set();
    target.querySelectorAll("[data-seq]").forEach(function (el) { seen.add(el.getAttribute("data-seq")); });
    source.addEventListener("open", function () { if (status) status.textContent = "Live"; });
    source.addEventListener("error", function () {
      if (!status) return;
      status.textContent = source.readyState === EventSource.CLOSED
        ? "Disconnected: reload the page (your session may have ended)."
        : "Reconnecting…";
    });
    source.addEventListener("uns", function (msg) {
      const ev = JSON.parse(msg.data);
      const seq = String(ev.sequence);
      if (seen.has(seq)) return;
      seen.add(seq);
      let item;
      if (target.tagName === "TBODY") {
        item = document.createElement("tr");
        const cells = [timeElement(ev.at), ev.kind, null, ev.summary];
        cells.forEach(function (value, i) {
          const td = document.createElement("td");
          if (i === 2) {
            const a = document.createElement("a");
            a.href = "/console/notifications/" + encodeURIComponent(ev.notification_id);
            a.textContent = ev.notification_type + " " + ev.notification_id.slice(0, 8);
            td.appendChild(a);
          } else if (value instanceof Node) {
            td.appendChild(value);
          } else {
            td.textContent = value;
          }
          item.appendChild(td);
        });
      } else {
        item = document.createElement("li");
        const t = document.createElement("span");
        t.className = "t";
        t.appendChild(timeElement(ev.at));
        const k = document.createElement("span");
        k.className = "kind";
        k.textContent = ev.kind;
        const w = document.createElement("span");
        w.className = "what";
        w.textContent = ev.summary;
        item.append(t, " ", k, " ", w);
      }
      const stale = document.getElementById("stale");
      if (stale && CHANGES_STATE.has(ev.kind)) stale.hidden = false;
      item.setAttribute("data-seq", seq);
      item.className = "new";
      if (append) target.appendChild(item); else target.insertBefore(item, target.firstChild);
      if (max > 0) while (target.children.length > max) target.removeChild(target.lastChild);
    });
  });
})();
