"""Azure OpenAI: OpenAI's protocol under a resource's endpoint, one Azure deployment per model.

``base_url`` is the resource's endpoint (https://NAME.openai.azure.com); each call goes to
``{base_url}/openai/deployments/{upstream_model}/{operation}?api-version={api_version}`` with
the secret in the ``api-key`` header. The deployment's upstream name is the Azure
deployment's name; the body names it as the model too, as Azure's own client does.
"""
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from gateway.upstream import register
from gateway.upstream.openai import OpenAIAdapter
from gateway.upstream.sse import EventStream
from models_catalog.provider_types import DEFAULT_AZURE_API_VERSION


@register("azure")
class AzureAdapter(OpenAIAdapter):
    def auth_headers(self, secret: str) -> dict[str, Any]:
        return {"api-key": secret}

    @property
    def api_version(self) -> str:
        return self.provider.api_version or DEFAULT_AZURE_API_VERSION

    def path(self, operation: str) -> str:
        return (f"/openai/deployments/{quote(self.upstream_model, safe='')}{super().path(operation)}"
                f"?api-version={quote(self.api_version, safe='')}")

    def _chunks(self, events: EventStream) -> Iterator[dict[str, Any]]:
        # Azure opens a stream with a chunk of its prompt filter results: no choices and no usage, which
        # OpenAI never sends and clients reading choices[0] of every chunk break on. It is left out.
        for chunk in super()._chunks(events):
            if chunk.get("choices") or chunk.get("usage"):
                yield chunk

    def probe_image(self) -> None:
        # Listing the resource's models proves the secret; an image would cost more than a probe should.
        self.transport.get(f"/openai/models?api-version={quote(self.api_version, safe='')}")

    def responses_path(self) -> str:
        # Azure's v1 API serves the Responses API at one path for the whole resource, with the deployment's
        # name as the body's model, and takes no api-version (Azure's own "v1" surface).
        return "/openai/v1/responses"
