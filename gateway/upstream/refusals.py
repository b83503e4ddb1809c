"""What an upstream's error answer says: each adapter reads its protocol's error body into a Refusal
(its ErrorReader), and HttpTransport.refused weighs it with what the request asked (Demand) and the
answer's Retry-After to decide whose failure it is (the request's, the deployment's, or its secret's)."""
import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass

# The longest cooldown an upstream's Retry-After can ask for (CONTRACT section 7).
MAX_RETRY_AFTER = 300


@dataclass(frozen=True)
class Refusal:
    """What an adapter read from its protocol's error body: the message and how to treat it.

    The flags come only from the protocol's machine-readable fields (an error type or code, a
    status word, a reason), never from the message's words: an upstream's message may quote the
    request, so words in it are the client's to choose (docs/routing.md, "Whose failure is it").
    """

    message: str = ""
    code: str | None = None
    param: str | None = None
    out_of_credit: bool = False  # the secret is refused, or its account has no quota or credit: disabled
    token_limit: bool = False  # a 429 of a limit on tokens, which the request's own size counts against
    declined: bool = False  # a refusal another deployment may not repeat: the request moves on, no health change


# The error body reader an adapter gives its transport: (status, body) -> Refusal.
ErrorReader = Callable[[int, bytes], Refusal]


def retry_after_seconds(value: str) -> float | None:
    """An upstream's Retry-After (seconds or an HTTP date) as seconds, at most MAX_RETRY_AFTER."""
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = moment.timestamp() - time.time()
    if seconds != seconds or seconds <= 0:  # NaN, or already past
        return None
    return min(seconds, MAX_RETRY_AFTER)
