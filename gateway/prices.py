"""What a request is held for and what its usage shows: token prices, holds and the token counts the
ledger keeps (CONTRACT section 12, docs/pricing.md). The charge and settlement themselves are
gateway.metering's; the pipeline (gateway.pipeline) asks these for the amounts."""
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from gateway import metering
from gateway.tokens import count_tokens
from gateway.upstream.shapes import prompt_text
from keys.pricing import TokenPrices
from models_catalog.served import ServedModel


def token_prices(model: ServedModel, *, units: int = 1) -> TokenPrices | None:
    """A chat or embedding model's token prices with its request fee (``cost`` per choice), or None for a
    model priced by its cost alone (images and speech always are; embeddings price input only)."""
    if model.type not in ("chat", "embedding") or (model.pricing_input is None and model.pricing_output is None):
        return None
    return _prices(model.cost * units, model.pricing_input or 0, model.pricing_cached_input,
                   model.pricing_output if model.type == "chat" else 0)


@functools.lru_cache(maxsize=256)
def _prices(fee: int, input: Decimal | int, cached_input: Decimal | None, output: Decimal | int | None) -> TokenPrices:
    # The catalog has a few sets of terms; each is made once, not per request.
    return TokenPrices.of(request_fee=fee, input=input, cached_input=cached_input, output=output)


@dataclass(frozen=True)
class Hold:
    """What a token-priced request may use, for its hold: the gateway's count of its input (counted only for
    such a model) and the output cap the request named (max_tokens and its kin), if any."""

    input_tokens: Callable[[], int]
    output_cap: int | None = None


def held_amount(model: ServedModel, prices: TokenPrices, hold: Hold | None, *, units: int = 1) -> int:
    """The most a token-priced request can cost (CONTRACT section 12): its fee, its counted input and its
    output cap for each choice: the cap it named, else the model's max_output_tokens. A cap above the
    model's is held as named: an upstream whose real limit is higher than the catalog says may use it."""
    if hold is None:
        return prices.price(input_tokens=0, output_tokens=0)
    cap = 0
    if model.type == "chat":
        cap = hold.output_cap or model.max_output_tokens or 0
    return prices.price(input_tokens=hold.input_tokens(), output_tokens=cap * units)


def ledger_tokens(usage: dict, name: str, estimate: Callable[[], int]) -> int:
    """The count the ledger keeps: the upstream's when it is a non-negative integer, else the gateway's
    estimate; either clamped (metering.clamp_tokens), so that the answer can show what was recorded."""
    value = usage.get(name) if isinstance(usage, dict) else None
    usable = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return metering.clamp_tokens(value if usable else estimate())


def cached_tokens(usage: dict) -> int:
    """The cached part of the prompt in OpenAI's usage (``prompt_tokens_details.cached_tokens``); 0 when absent."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    return ledger_tokens(details, "cached_tokens", lambda: 0) if isinstance(details, dict) else 0


def metered_usage(usage: dict, *, input_tokens: int, output_tokens: int, cached: int, cost: int | None = None) -> dict:
    """OpenAI's usage object of an answer or a stream's usage chunk, showing the counts the ledger keeps
    (clamped, or estimated where the upstream's could not be used) instead of the upstream's, and for a
    token-priced model ``cost``, the credits charged (CONTRACT section 12).

    It works on the upstream's object, not on a gateway.conversation.Usage: every member the counts leave
    alone stays as sent (OpenAI's audio and prediction tokens, say), and a detail sent unusable is shown as
    0, where a Usage would not know it."""
    shown = {**usage, "prompt_tokens": input_tokens, "completion_tokens": output_tokens,
             "total_tokens": input_tokens + output_tokens}
    if cost is not None:
        shown["cost"] = cost
    for name, part, most in (("prompt_tokens_details", "cached_tokens", cached),
                             ("completion_tokens_details", "reasoning_tokens", output_tokens)):
        details = usage.get(name)
        if isinstance(details, dict) and part in details:
            shown[name] = {**details, part: min(ledger_tokens(details, part, lambda: 0), most)}
    return shown


# Tokens an upstream bills beyond each message's text (its role and separators) and for priming the reply
# (OpenAI's published accounting: 3 and 3). Counted into a hold, never into usage (docs/pricing.md).
MESSAGE_OVERHEAD, REPLY_OVERHEAD = 3, 3
_OUTPUT_CAPS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def prompt_tokens_held(params: dict) -> int:
    """The input a chat request is held for: the gateway's count of its messages and tools, with the
    tokens an upstream adds around each message."""
    messages, tools = params["messages"], params.get("tools")
    return (count_tokens(prompt_text(messages)) + (count_tokens(json.dumps(tools)) if tools else 0)
            + MESSAGE_OVERHEAD * len(messages) + REPLY_OVERHEAD)


def output_cap(params: dict) -> int | None:
    """The output cap a chat request names (OpenAI's max_completion_tokens or max_tokens, the Responses
    API's max_output_tokens: the least of those given), None when it names none."""
    caps = [value for value in (params.get(name) for name in _OUTPUT_CAPS)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0]
    return min(caps) if caps else None
