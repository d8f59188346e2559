// The job creation page: when the view switches between form and YAML, the button that was
// pressed is replaced with the rest of the editor; keep the keyboard there rather than lose it.
"use strict";
document.addEventListener("htmx:afterSettle", () => {
  const editor = document.getElementById("editor");
  if (editor && (document.activeElement === document.body || !document.activeElement)) {
    const pressed = editor.querySelector('.view-switch button[aria-pressed="true"]');
    if (pressed) {
      pressed.focus();
    }
  }
});
