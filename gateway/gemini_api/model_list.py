"""The catalog's models as Google's Model resources (GET models and models/{id})."""
from collections.abc import Iterable

from keys.models import ApiKey

# The catalog keeps no context window. Google's clients budget their prompts from inputTokenLimit and
# outputTokenLimit, so a model is listed with the figures of Google's current models (a chat model's output
# limit is its catalog max_output_tokens when it has one); a model that takes less refuses a longer request.
CHAT_INPUT_LIMIT = 1_048_576
CHAT_OUTPUT_LIMIT = 65_536
EMBEDDING_INPUT_LIMIT = 2_048
METHODS = {"chat": ["generateContent", "streamGenerateContent", "countTokens"],
           "embedding": ["embedContent", "batchEmbedContents"]}


def model_entry(model) -> dict:
    """A catalog model as Google's Model resource."""
    chat = model.type == "chat"
    return {"name": f"models/{model.model_id}", "baseModelId": model.model_id, "version": "001",
            "displayName": model.model_id, "description": f"{model.model_id}, served by this gateway "
                                                          f"({model.owned_by}).",
            "inputTokenLimit": CHAT_INPUT_LIMIT if chat else EMBEDDING_INPUT_LIMIT,
            "outputTokenLimit": (getattr(model, "max_output_tokens", None) or CHAT_OUTPUT_LIMIT) if chat else 1,
            "supportedGenerationMethods": METHODS[model.type]}


def model_list(models: Iterable, key: ApiKey) -> list[dict]:
    """The chat and embedding models ``key`` may use, each once (the catalog also finds a model by its aliases)."""
    usable = {model.model_id: model for model in models if model.type in METHODS and key.can_use(model)}
    return [model_entry(usable[model_id]) for model_id in sorted(usable)]
