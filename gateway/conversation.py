"""The gateway's own shape of a conversation, typed: what every inbound API and every upstream adapter
shares, whatever its wire.

The neutral shape is the chat completion's (OpenAI's chat.completion and its chunks), so its stop reasons
are OpenAI's finish reasons and its usage is chat's. Each wire maps to and from these beside its reverse:
Anthropic's stop reasons in gateway.upstream.anthropic_answer, Gemini's finish reasons in
gateway.upstream.gemini_answer, the Responses API's incomplete reasons in gateway.upstream.openai. What is
typed so far and what still travels as a dict is in docs/architecture.md ("One conversation shape").
"""
from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class StopReason(StrEnum):
    """Why a choice ended. A member is its own wire name in a chat answer (a ``str``), so a mapping keyed by
    the members is read with the plain string a chunk carries."""

    STOP = "stop"  # the model finished its turn, or met a stop sequence
    LENGTH = "length"  # the output cap, or the context window, cut it short
    TOOL_CALLS = "tool_calls"  # it ends calling one or more tools
    CONTENT_FILTER = "content_filter"  # the provider withheld output, or the model refused
    FUNCTION_CALL = "function_call"  # chat's older single-function call, still read from clients and upstreams


class PassedThrough(dict[str, Any]):
    """What an adapter hands back for a request it sent as the client wrote it (a Messages request to an
    anthropic deployment, a Responses request to a deployment that speaks it, a Gemini request to a gemini
    one): ``native``, the provider's own answer or stream event, which the client gets as it came, kept
    beside its neutral translation, which is the mapping itself.

    It is a chat answer or chunk so that the metering reads and stamps it as it does any other (its usage,
    the model's name) without knowing it was passed through; the codec that sent the request tests
    ``isinstance(..., PassedThrough)`` and answers with ``native``. ``carries_output`` marks an event that
    is output though its translation shows none (a thinking delta): it commits a stream
    (gateway.upstream.shapes.ChunkStream) as content does.
    """

    __slots__ = ("native", "carries_output")

    def __init__(self, translation: Mapping[str, Any], native: dict[str, Any], *,
                 carries_output: bool = False) -> None:
        super().__init__(translation)
        self.native = native
        self.carries_output = carries_output

    def __repr__(self) -> str:
        return f"PassedThrough({dict(self)!r}, native={self.native!r})"
