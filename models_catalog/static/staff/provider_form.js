// The provider form shows the fields its type uses: api_version for azure, max_tokens_default for
// anthropic, no base URL or secrets for the local models. The server checks them all the same
// (models_catalog.catalog.check_provider); this only spares staff fields that mean nothing for the type.
(function () {
  var HTTP = ["openai", "azure", "anthropic", "gemini"];
  var only = {"api_version": ["azure"], "max_tokens_default": ["anthropic"], "base_url": HTTP, "api_key_env": HTTP,
              "api_key_envs": HTTP};
  var neutral = {"max_tokens_default": "4096"};  // what the field holds when the type ignores it
  function update() {
    var type = document.getElementById("id_type");
    Object.keys(only).forEach(function (name) {
      var row = document.querySelector(".form-row.field-" + name);
      var input = document.getElementById("id_" + name);
      if (!row || !input) return;
      // A field holding a value, or refused by the server, stays in view so that it can be fixed.
      var set = input.value !== (neutral[name] || "");
      row.hidden = only[name].indexOf(type.value) === -1 && !set && !row.classList.contains("errors");
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var type = document.getElementById("id_type");
    if (type) { type.addEventListener("change", update); update(); }
  });
})();
