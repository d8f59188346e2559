// What the pages need beyond htmx (no inline script: the CSP refuses it).
// - A button with data-opens="ID" opens the <dialog> ID (a confirmation); data-closes closes it.
// - A <select data-submits> submits its form when changed (the log page's replica).
// - A followed log (pre#log): each line an element; it stays at its newest line while the reader
//   has not scrolled up (or turned "Keep at the newest line" off), its times are shown in the
//   reader's local time or hidden, and the search box shows only the lines that contain its text,
//   the text marked.
// The resource charts load their own script (resources.js).
"use strict";
document.addEventListener("click", (event) => {
  const opener = event.target.closest ? event.target.closest("[data-opens]") : null;
  if (opener) document.getElementById(opener.dataset.opens)?.showModal();
  const closer = event.target.closest ? event.target.closest("[data-closes]") : null;
  if (closer) document.getElementById(closer.dataset.closes)?.close();
});
document.addEventListener("change", (event) => {
  if (event.target.matches && event.target.matches("select[data-submits]")) event.target.form.requestSubmit();
});

(() => {
  const log = document.getElementById("log");
  if (!log) return;
  const search = document.getElementById("log-search");
  const matches = document.getElementById("log-matches");
  const follow = document.getElementById("log-follow");
  const stamps = document.getElementById("log-stamps");
  let lastTop = 0;

  function localTime(stamp) {
    const moment = new Date(stamp.dateTime);
    if (Number.isNaN(moment.getTime())) return;
    const pad = (n, width) => String(n).padStart(width || 2, "0");
    stamp.textContent = `${moment.getFullYear()}-${pad(moment.getMonth() + 1)}-${pad(moment.getDate())} ` +
      `${pad(moment.getHours())}:${pad(moment.getMinutes())}:${pad(moment.getSeconds())}.${pad(moment.getMilliseconds(), 3)}`;
    stamp.title = stamp.dateTime + " (UTC)";
  }

  function textOf(line) {
    // The line's own words, without its time.
    return [...line.childNodes].filter((node) => !(node.classList && node.classList.contains("stamp")))
      .map((node) => node.textContent).join("");
  }

  function mark(line, wanted) {
    for (const old of line.querySelectorAll("mark")) old.replaceWith(document.createTextNode(old.textContent));
    line.normalize();
    if (!wanted) return;
    for (const node of [...line.childNodes]) {
      if (node.nodeType !== Node.TEXT_NODE) continue;
      const at = node.textContent.toLowerCase().indexOf(wanted);
      if (at < 0) continue;
      const found = node.splitText(at);
      found.splitText(wanted.length);
      const marked = document.createElement("mark");
      marked.textContent = found.textContent;
      found.replaceWith(marked);
    }
  }

  function filter(lines) {
    const wanted = search.value.trim().toLowerCase();
    for (const line of lines) {
      const shown = !wanted || textOf(line).toLowerCase().includes(wanted);
      line.classList.toggle("hidden", !shown);
      mark(line, shown ? wanted : "");
    }
    const all = log.querySelectorAll(".ln");
    matches.textContent = wanted ? `${log.querySelectorAll(".ln:not(.hidden)").length} of ${all.length} lines` : "";
  }

  function toBottom() {
    if (follow.checked) log.scrollTop = log.scrollHeight;
    lastTop = log.scrollTop;
  }

  new MutationObserver((changes) => {
    const added = changes.flatMap((change) => [...change.addedNodes]).filter((node) => node.classList && node.classList.contains("ln"));
    for (const line of added) line.querySelectorAll("time.stamp").forEach(localTime);
    if (search.value.trim()) filter(added); else matches.textContent = "";
    toBottom();
  }).observe(log, { childList: true });

  log.addEventListener("scroll", () => {
    // Scrolling up stops following; scrolling back to the end follows again.
    const atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 4;
    if (log.scrollTop < lastTop && !atEnd) follow.checked = false;
    else if (atEnd) follow.checked = true;
    lastTop = log.scrollTop;
  });
  follow.addEventListener("change", toBottom);
  stamps.addEventListener("change", () => log.classList.toggle("no-stamps", !stamps.checked));
  search.addEventListener("input", () => { filter(log.querySelectorAll(".ln")); toBottom(); });
})();
