// Copy button for the one-time secret. The Clipboard API needs a secure context
// (https or localhost); elsewhere the text is selected so the user can copy it.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-copy-target]");
  if (!button) return;
  var field = document.getElementById(button.getAttribute("data-copy-target"));
  var status = document.getElementById("copy-status");
  if (!field) return;
  function say(text) { if (status) status.textContent = text; }
  field.focus();
  field.select();
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(field.value).then(
      function () { say("Copied to the clipboard."); button.textContent = "Copied"; },
      function () { say("Press Ctrl+C (⌘C) to copy the selected secret."); }
    );
  } else {
    var copied = false;
    try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
    say(copied ? "Copied to the clipboard." : "Press Ctrl+C (⌘C) to copy the selected secret.");
    if (copied) button.textContent = "Copied";
  }
});
