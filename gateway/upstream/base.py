"""What the HTTP adapters share: the deployment's secret, read from its variable, and the transport
that carries it in the type's own header."""
import os
from functools import cached_property
from typing import Any

from gateway.upstream.shapes import Audio, Image
from gateway.upstream.refusals import Refusal
from gateway.upstream.transport import Deadline, HttpTransport, json_object
from models_catalog.catalog import secret_env_allowed
from models_catalog.served import AnyDeployment
from models_catalog.provider_types import TYPES
from utils_app.errors import UpstreamError, UpstreamNotConfigured

PROBE_TEXT = "ping"


class HttpAdapter:
    """An adapter that calls its provider over HTTP. Subclasses name the secret's header
    (``auth_headers``), read their protocol's error bodies (``read_error``) and map the operations."""

    def __init__(self, deployment: AnyDeployment, deadline: Deadline):
        self.deployment = deployment
        self.provider = deployment.provider
        self.name = self.provider.name
        self.upstream_model = deployment.upstream_name
        self.deadline = deadline
        # What this attempt left out of the request because the deployment cannot honour it (CONTRACT
        # section 8): names as X-Gateway-Ignored lists them, filled by the adapter or the inbound dialect.
        self.ignored: list[str] = []

    def secret(self) -> str:
        variable = self.deployment.secret_env
        if not variable:
            return ""  # an upstream without authentication (a local OpenAI-compatible server)
        if not secret_env_allowed(variable):
            # Only variables meant for upstream secrets are ever read and sent (docs/hardening.md).
            raise UpstreamNotConfigured(f"The upstream provider '{self.name}' is not configured on this gateway "
                                        f"({variable} is not an allowed secret variable).")
        secret = os.environ.get(variable, "").strip()
        if not secret:
            # Fail before any network traffic: without the secret the call cannot succeed.
            raise UpstreamNotConfigured(f"The upstream provider '{self.name}' is not configured on this gateway "
                                        f"({variable} is not set).")
        return secret

    def auth_headers(self, secret: str) -> dict[str, Any]:
        raise NotImplementedError

    def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def read_error(self, status: int, content: bytes) -> Refusal:
        """An OpenAI-shaped error body, ``{"error": {"message", "type", "code", "param"}}`` (the default)."""
        return openai_refusal(content)

    # The transport's class, and headers every call of the type carries besides the secret's.
    transport_class = HttpTransport
    type_headers: dict[str, Any] = {}

    @cached_property
    def transport(self) -> HttpTransport:
        secret = self.secret()
        headers = {**self.type_headers, **(self.auth_headers(secret) if secret else {})}
        # A type with a public API has a default base URL (models_catalog.provider_types).
        base_url = self.provider.base_url or TYPES[self.provider.type].default_base_url
        return self.transport_class(name=self.name, base_url=base_url, timeout=self.provider.timeout,
                                    headers=headers, secret=secret, read_error=self.read_error,
                                    deadline=self.deadline)

    def unsupported(self, operation: str) -> UpstreamError:
        # The catalog refuses such a model; this only guards a pool edited around the checks.
        return UpstreamError(f"The upstream provider '{self.name}' ({self.provider.type}) does not serve "
                             f"{operation} requests.")

    def images(self, payload: dict[str, Any]) -> list[Image]:
        raise self.unsupported("image")

    def speech(self, payload: dict[str, Any]) -> Audio:
        raise self.unsupported("speech")

    def embeddings(self, payload: dict[str, Any]) -> dict[str, Any]:
        raise self.unsupported("embedding")

    def probe(self, operation: str) -> None:
        """One token of chat, one short embedding or a word of speech; an image model is probed through
        ``probe_image`` (a generated image would cost more than a probe should)."""
        if operation == "chat":
            self.chat({"messages": [{"role": "user", "content": PROBE_TEXT}], "max_tokens": 1})
        elif operation == "embedding":
            self.embeddings({"input": PROBE_TEXT})
        elif operation == "speech":
            self.speech({"input": PROBE_TEXT, "voice": "alloy"})
        else:
            self.probe_image()

    def probe_image(self) -> None:
        raise self.unsupported("image")


# OpenAI's error codes and types that refuse the secret itself, whatever the status they come with:
# ``insufficient_quota`` (sent with 429) says the account is out of credit.
SECRET_REFUSED = {"insufficient_quota", "invalid_api_key"}


def openai_refusal(content: bytes) -> Refusal:
    """OpenAI's error body. Only its code and type decide what it means for the deployment (the message may
    quote the request): ``insufficient_quota`` or ``invalid_api_key`` refuse the secret; a 429 of type
    ``tokens`` (a tokens-per-minute or per-day limit; ``rate_limit_exceeded`` is its code) is a limit the
    request's own size counts against."""
    error = (json_object(content) or {}).get("error")
    if not isinstance(error, dict):
        error = {"message": error} if isinstance(error, str) else {}
    text = {name: error[name] for name in ("message", "code", "param", "type") if isinstance(error.get(name), str)}
    return Refusal(message=text.get("message", ""), code=text.get("code"), param=text.get("param"),
                   out_of_credit=bool(SECRET_REFUSED & {text.get("code"), text.get("type")}),
                   token_limit=text.get("type", "").startswith("tokens"))
