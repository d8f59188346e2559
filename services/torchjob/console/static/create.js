// The job creation page: when the view switches between form and YAML, the button that was
// pressed is replaced with the rest of the editor; keep the keyboard there rather than lose it.
// The Kind choice's help says what the chosen kind is, as the choice changes.
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
document.addEventListener("change", (event) => {
  const choice = event.target;
  if (choice instanceof HTMLSelectElement && choice.id === "f-kind") {
    const help = document.getElementById("hint-kind");
    const chosen = choice.selectedOptions[0];
    if (help && chosen && chosen.dataset.help) {
      help.textContent = chosen.dataset.help;
    }
  }
});
