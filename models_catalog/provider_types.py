"""The kinds of upstream a provider can be: the one list of provider types.

Each type names the wire protocol the gateway speaks to such a provider (CONTRACT
section 8), which model types it can serve and which catalog fields it takes. The
catalog loader, the staff forms and the admin read this list; the gateway's upstream
package (gateway/upstream) registers one adapter per name here, and a test checks
that every type has its adapter.
"""
from dataclasses import dataclass

MODEL_TYPES = ("chat", "image", "speech", "embedding")


@dataclass(frozen=True)
class ProviderType:
    name: str
    description: str
    operations: tuple[str, ...]  # the model types a provider of this type can serve
    default_base_url: str = ""  # "" with takes_base_url: base_url is required
    takes_base_url: bool = True
    takes_secrets: bool = True
    fields: tuple[str, ...] = ()  # catalog fields particular to the type
    # Whether the URL path of a call carries the upstream model's name (not only the body), and the
    # collections it may be named under there ("tunedModels/x"): catalog.check_pool holds such a name
    # to one plain path segment, so that no name can lead a call to another path of the provider's host.
    model_in_path: bool = False
    model_collections: tuple[str, ...] = ()

    def serves(self, model_type: str) -> bool:
        return model_type in self.operations


TYPES = {kind.name: kind for kind in (
    ProviderType("openai", "OpenAI's API, or any OpenAI-compatible one, at base_url", MODEL_TYPES),
    ProviderType("azure", "Azure OpenAI: deployments under the resource's endpoint", MODEL_TYPES,
                 fields=("api_version",), model_in_path=True),
    ProviderType("anthropic", "Anthropic's Messages API", ("chat",),
                 default_base_url="https://api.anthropic.com", fields=("max_tokens_default",)),
    ProviderType("gemini", "Google's Gemini API", ("chat", "embedding"),
                 default_base_url="https://generativelanguage.googleapis.com/v1beta", model_in_path=True,
                 model_collections=("models", "tunedModels")),
    ProviderType("local", "In-process development models: no network, deterministic output", MODEL_TYPES,
                 takes_base_url=False, takes_secrets=False),
)}
PROVIDER_TYPES = tuple(TYPES)

# What an Azure provider sends as api-version when the catalog names none.
DEFAULT_AZURE_API_VERSION = "2024-10-21"
# What an Anthropic provider sends as max_tokens when the client names none (the API requires it).
DEFAULT_MAX_TOKENS = 4096


def provider_type(name: str) -> ProviderType:
    return TYPES[name]
