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
and what the answer means for the deployment's health. The protocol, the registry and
``adapter_for`` are in gateway.upstream.base, beside the HTTP adapters' common class.
"""
from gateway.upstream.base import ADAPTERS, Adapter, adapter_for, register
from gateway.upstream.shapes import Audio, ChunkStream, Image, commits
from gateway.upstream.transport import Deadline

# The adapters register themselves on import.
from gateway.upstream import anthropic, azure, gemini, local, openai  # noqa: F401

__all__ = ["ADAPTERS", "Adapter", "Audio", "ChunkStream", "Deadline", "Image", "adapter_for", "commits", "register"]
