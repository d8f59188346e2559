// What the pages need beyond htmx: keep a followed log scrolled to its end while the reader is
// there. The resource charts load their own script (resources.js).
"use strict";
document.addEventListener("htmx:sseMessage", (event) => {
  const log = event.target.closest ? event.target.closest("pre.log") : null;
  if (log && log.dataset.follow === "on" && log.scrollHeight - log.scrollTop - log.clientHeight < 80) {
    log.scrollTop = log.scrollHeight;
  }
});
