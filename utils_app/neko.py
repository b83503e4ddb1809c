"""A random neko image from the neko upstream (settings.NEKO_API_URL).

The upstream's answer is kept for a few seconds in the shared cache: a page that
asks for images in a burst costs the upstream one call, and each client still
gets a random pick from whatever pool the upstream returned. Works with APIs that
answer ``{"results": [{"url", "artist_name", "source_url", ...}]}`` (nekos.best)
and with those that answer a bare ``{"url": ...}``.
"""
import logging
import random

from django.conf import settings

from utils_app.cache import cache_get, cache_set
from utils_app.errors import UpstreamError, UpstreamTimeout
from utils_app.http import TRANSPORT_ERRORS, Upstreams, is_timeout, json_object, timeouts

log = logging.getLogger("gateway.neko")

CACHE_SECONDS = 10
TIMEOUT = timeouts(5)
CACHE_KEY = "neko:pool"

_upstreams = Upstreams(pool_size=32)


def random_image() -> dict:
    """``{"url", "artist", "artist_url", "source"}``; raises UpstreamError (502/504)."""
    # A cache outage costs an upstream call, never the answer.
    pool = cache_get(CACHE_KEY, why="asking the neko upstream")
    if pool is None:
        pool = _fetch_pool()
        cache_set(CACHE_KEY, pool, CACHE_SECONDS)
    return random.choice(pool)


def _fetch_pool() -> list[dict]:
    url = settings.NEKO_API_URL
    try:
        response = _upstreams.session(url).get(url, timeout=TIMEOUT, allow_redirects=False)
    except TRANSPORT_ERRORS as exc:
        if is_timeout(exc):
            log.warning("neko upstream timed out")
            raise UpstreamTimeout("The neko image service did not answer in time.") from None
        log.warning("neko upstream unreachable: %s", exc.__class__.__name__)
        raise UpstreamError("The neko image service could not be reached.") from None
    if response.status_code != 200:
        log.warning("neko upstream answered %s", response.status_code)
        raise UpstreamError("The neko image service could not be reached.")
    pool = [image for image in map(_image, _candidates(json_object(response.content))) if image]
    if not pool:
        log.warning("neko upstream sent no usable image")
        raise UpstreamError("The neko image service sent no usable image.")
    return pool


def _candidates(body) -> list:
    if isinstance(body, dict) and isinstance(body.get("results"), list):
        return body["results"]
    return [body]


def _image(item) -> dict | None:
    if not isinstance(item, dict) or not _is_web_url(item.get("url")):
        return None
    # Only http(s) links are passed on: a client may put these straight into a page.
    return {
        "url": item["url"],
        "artist": _text(item.get("artist_name") or item.get("artist")),
        "artist_url": item.get("artist_href") if _is_web_url(item.get("artist_href")) else None,
        "source": item.get("source_url") if _is_web_url(item.get("source_url")) else None,
    }


def _is_web_url(value) -> bool:
    return isinstance(value, str) and value.startswith(("https://", "http://")) and len(value) <= 2000


def _text(value) -> str | None:
    return value[:200] if isinstance(value, str) and value else None
