"""HTTP client of the community platform's API.

One pooled session for the whole process (a TLS handshake costs more than the
lookup), short timeouts, no redirects. The bot token only ever travels in the
Authorization header: it is never logged and never part of an error message.
"""
import logging
import math
from dataclasses import dataclass

from django.conf import settings

from utils_app.http import TRANSPORT_ERRORS, Upstreams, is_timeout, json_object, timeouts

log = logging.getLogger("gateway.community")

# A lookup that takes longer than this is not worth holding a worker thread for.
TIMEOUT = timeouts(8)
USER_AGENT = "DiscordBot (model-gateway, 1.0)"

# Two hosts' pools, each sized like the gunicorn thread count so threads do not queue for a socket.
_upstreams = Upstreams(pool_size=32, hosts=2, user_agent=USER_AGENT)


class PlatformError(Exception):
    """The platform gave no usable answer. ``kind``: unreachable, timeout or rate_limited."""

    def __init__(self, kind: str, *, retry_after: int | None = None):
        super().__init__(kind)
        self.kind = kind
        self.retry_after = retry_after


@dataclass(frozen=True)
class PlatformResponse:
    status: int
    body: dict | None


def get(path: str, *, params: dict | None = None) -> PlatformResponse:
    """GET ``path`` (already made of validated, URL-safe parts) on the platform's API.

    Returns the status and JSON object of any 2xx or 4xx answer except 429;
    raises PlatformError for rate limits, server errors, timeouts and broken bodies.
    """
    headers = {}
    if settings.DISCORD_BOT_TOKEN:
        headers["Authorization"] = f"Bot {settings.DISCORD_BOT_TOKEN}"
    base = settings.DISCORD_API_BASE
    try:
        response = _upstreams.session(base).get(f"{base}{path}", params=params, headers=headers,
                                                timeout=TIMEOUT, allow_redirects=False)
    except TRANSPORT_ERRORS as exc:
        if is_timeout(exc):
            log.warning("community platform timed out on %s", path)
            raise PlatformError("timeout") from None
        log.warning("community platform unreachable on %s: %s", path, exc.__class__.__name__)
        raise PlatformError("unreachable") from None

    if response.status_code == 429:
        retry_after = _retry_after(response)
        log.warning("community platform rate limit on %s; retry after %ss", path, retry_after)
        raise PlatformError("rate_limited", retry_after=retry_after)
    if response.status_code >= 500 or response.status_code < 200 or 300 <= response.status_code < 400:
        log.warning("community platform answered %s on %s", response.status_code, path)
        raise PlatformError("unreachable")
    body = json_object(response.content)
    if response.status_code < 300 and body is None:
        log.warning("community platform sent a body that is not a JSON object on %s", path)
        raise PlatformError("unreachable")
    return PlatformResponse(response.status_code, body)


def _retry_after(response) -> int:
    """Whole seconds to wait: the Retry-After header, else the body's retry_after, else 1."""
    candidates = [response.headers.get("Retry-After")]
    body = json_object(response.content)
    if body is not None:
        candidates.append(body.get("retry_after"))
    for value in candidates:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return max(1, math.ceil(seconds))
    return 1
