"""What every adapter shares: the protocol, the registry of adapters by provider type and the choice of
one for a deployment (gateway.upstream says what each type is); what a deployment cannot honour; and what
the HTTP adapters share: the deployment's secret, read from its variable, and the transport that carries it
in the type's own header."""
import os
import re
from collections.abc import Callable, Iterable
from functools import cached_property
from typing import Any, Protocol, TypeVar

from gateway.upstream.shapes import Audio, ChunkStream, Image
from gateway.upstream.refusals import Refusal
from gateway.upstream.transport import Deadline, HttpTransport
from models_catalog.served import AnyDeployment, ServedModel, secret_env_allowed
from models_catalog.provider_types import TYPES
from utils_app.errors import InvalidRequest, UnsupportedParameter, UpstreamError, UpstreamNotConfigured
from utils_app.http import json_object

PROBE_TEXT = "ping"


class Adapter(Protocol):
    """One attempt at one deployment. ``payload`` is the client's OpenAI-shaped, validated request body;
    the adapter sends it under the deployment's upstream name, in its provider's protocol."""

    # Names of what the attempt left out of the request (CONTRACT section 8's "dropped and named"):
    # a member by its dotted path, a header by its name, a tool as tools:<type or name>.
    ignored: list[str]

    def __init__(self, deployment: AnyDeployment, deadline: Deadline): ...

    def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A chat.completion object."""

    def chat_stream(self, payload: dict[str, Any]) -> ChunkStream:
        """chat.completion.chunk objects, received up to the commit point."""

    def images(self, payload: dict[str, Any]) -> list[Image]:
        """The image bytes, whatever form the upstream sent them in."""

    def speech(self, payload: dict[str, Any]) -> Audio:
        """The audio bytes and their content type."""

    def embeddings(self, payload: dict[str, Any]) -> dict[str, Any]:
        """OpenAI's list of embeddings."""

    def probe(self, operation: str) -> None:
        """The cheapest call that proves the secret and the model work; raises the upstream error if not."""


ADAPTERS: dict[str, Callable[[AnyDeployment, Deadline], Adapter]] = {}
_A = TypeVar("_A", bound=Callable[[AnyDeployment, Deadline], Adapter])


def register(name: str) -> Callable[[_A], _A]:
    """Class decorator: the adapter of the provider type ``name``."""
    if name not in TYPES:
        raise ValueError(f"{name!r} is not a provider type (models_catalog.provider_types)")

    def decorate(cls: _A) -> _A:
        ADAPTERS[name] = cls
        return cls
    return decorate


def adapter_for(deployment: AnyDeployment, deadline: Deadline | None = None) -> Adapter:
    return ADAPTERS[deployment.provider.type](deployment, deadline or Deadline(deployment.provider.timeout))


# -- what a deployment cannot honour (CONTRACT section 8), for the adapters that translate a chat request
#
# Agent clients and SDKs send, on every request, members that steer OpenAI's own server features
# (its prompt cache, its stored completions, its service tiers, its moderation). An upstream of another
# protocol has no such feature: the answer it gives without them is still a correct answer of the shape
# the client parses, so such a member is left out and named on the attempt (``ignored``, answered as
# X-Gateway-Ignored). What would change that shape (audio output, say) is refused instead, before any
# credit is taken. ``reasoning_effort`` is not among them: each translating adapter maps it to its upstream's
# own knob (gateway.conversation_request's Effort), or names it where that upstream cannot think with the
# rest of the request.

# OpenAI's members for its own server features: left out (and named) by every adapter that translates.
SERVER_FEATURES = ("service_tier", "metadata", "store", "prompt_cache_key", "prompt_cache_options",
                   "prompt_cache_retention", "safety_identifier", "prediction", "web_search_options", "moderation",
                   "verbosity", "audio")


# What X-Gateway-Ignored may say of one request: names of at most NAME_MAX characters of letters, digits and
# _ . : - (any other becomes _), at most NAMES_MAX of them, then MORE. A name may come from the client's body (a
# member, an item's or a tool's type) and goes into a header and a log line, which a line break would break.
NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_.:-]")
NAME_MAX = 100
NAMES_MAX = 64
MORE = "more"


def ignored_name(name: str) -> str:
    """A name as X-Gateway-Ignored may say it."""
    return NOT_IN_A_NAME.sub("_", name[:NAME_MAX])


def ignored_names(names: Iterable[str]) -> list[str]:
    """What an attempt left out, as X-Gateway-Ignored says it: each name once (in the order first met), safe,
    at most NAMES_MAX of them, then MORE."""
    found = list(dict.fromkeys(ignored_name(name) for name in names))
    return found if len(found) <= NAMES_MAX else [*found[:NAMES_MAX], MORE]


def name_left_out(payload: dict[str, Any], ignored: list[str] | None, names: tuple[str, ...] = SERVER_FEATURES) -> None:
    """Name each of ``names`` the request carries. One that asks for nothing (null, false, 0, empty) is
    honoured by doing nothing, so it is not named."""
    if ignored is None:
        return
    ignored.extend(name for name in names if payload.get(name))


def refuse_audio_output(payload: dict[str, Any]) -> None:
    """Audio output (``modalities`` with "audio") is a shape of answer (message.audio) only OpenAI's API
    gives: left out, the client would parse an answer without what it asked for."""
    modalities = payload.get("modalities") or ()
    if "audio" in modalities:
        raise UnsupportedParameter("The parameter 'modalities' is not supported for this model: it answers in "
                                   "text only, not with audio.", param="modalities")


# Each translating type's check of what it refuses, registered by its adapter's module; a type without one
# (openai, azure) passes every member on and refuses nothing.
REFUSALS: dict[str, Callable[[dict[str, Any]], None]] = {}


def refuse_before_charge(model: ServedModel, payload: dict[str, Any], *, passed_through: tuple[str, ...] = ()) -> None:
    """Refuse a request no deployment of the model's pool can serve (the first refusal), before any credit is
    taken; a request one of them can serve goes on (the pool's attempts skip those that refuse it). The types
    in ``passed_through`` get the client's own request (Messages to anthropic) and refuse nothing."""
    refusal: InvalidRequest | None = None
    for deployment in model.pool:
        check = REFUSALS.get(deployment.provider.type)
        if check is None or deployment.provider.type in passed_through:
            return
        try:
            check(payload)
        except InvalidRequest as exc:
            refusal = refusal or exc
            continue
        return
    if refusal is not None:
        raise refusal


def unsupported(param: str, why: str) -> UnsupportedParameter:
    """The refusal of a parameter the deployment's protocol has no way to honour, saying why."""
    return UnsupportedParameter(f"The parameter '{param}' is not supported for this model: {why}.", param=param)


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
