"""What a deployment cannot honour (CONTRACT section 8), for the adapters that translate a chat request.

Agent clients and SDKs send, on every request, members that steer OpenAI's own server features
(its prompt cache, its stored completions, its service tiers, its moderation). An upstream of another
protocol has no such feature: the answer it gives without them is still a correct answer of the shape
the client parses, so such a member is left out and named on the attempt (``ignored``, answered as
X-Gateway-Ignored). What would change that shape (audio output, say) is refused instead, before any
credit is taken. ``reasoning_effort`` is not among them: each translating adapter maps it to its upstream's
own knob (gateway.conversation_request's Effort), or names it where that upstream cannot think with the
rest of the request.
"""
from collections.abc import Callable
from typing import Any

from models_catalog.served import ServedModel
from utils_app.errors import InvalidRequest, UnsupportedParameter

# OpenAI's members for its own server features: left out (and named) by every adapter that translates.
SERVER_FEATURES = ("service_tier", "metadata", "store", "prompt_cache_key", "prompt_cache_options",
                   "prompt_cache_retention", "safety_identifier", "prediction", "web_search_options", "moderation",
                   "verbosity", "audio")


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
