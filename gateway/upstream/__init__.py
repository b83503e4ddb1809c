"""The upstreams: one adapter per provider type, all behind one protocol.

Clients speak OpenAI's API (or Anthropic's, on /v1/messages), and the metering
pipeline speaks it too: every adapter takes OpenAI-shaped request bodies and hands back
OpenAI-shaped answers, translating to and from its provider's own protocol. Each type
named in models_catalog.provider_types has its module here, registered by that name
(as healthchecks keeps its transports):

    openai     OpenAI's API and every OpenAI-compatible one
    azure      Azure OpenAI
    anthropic  Anthropic's Messages API
    gemini     Google's Gemini API
    local      the in-process development models

An adapter serves one attempt at one deployment (a provider, one of its secrets, the
upstream's name for the model) within the attempt's deadline. Its failures are the
upstream errors of utils_app.errors, which tell the router whether the request moves on
and what the answer means for the deployment's health.
"""
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from gateway.upstream.shapes import Audio, ChunkStream, Image, commits
from gateway.upstream.transport import Deadline
from models_catalog.served import AnyDeployment
from models_catalog.provider_types import TYPES


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


# The adapters register themselves on import.
from gateway.upstream import anthropic, azure, gemini, local, openai  # noqa: E402, F401

__all__ = ["ADAPTERS", "Adapter", "Audio", "ChunkStream", "Deadline", "Image", "adapter_for", "commits", "register"]
