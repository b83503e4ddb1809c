"""Invite, guild and user lookups on the community platform, cached in the shared cache.

Invite results are cached whether the invite exists or not, so a popular link
(or a bot hammering an unknown one) costs one platform call per few minutes.
Transient failures are cached briefly too: while the platform is down, clients
get a quick 502 instead of each waiting for the timeout.
"""
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import cast

from django.conf import settings

from community import client, links
from community.client import PlatformError
from community.models import Guild
from utils_app.cache import cache_get, cache_get_many, cache_set
from utils_app.errors import (
    InvalidRequest,
    NotFound,
    PlatformNotConfigured,
    PlatformTokenRejected,
    RateLimited,
    UpstreamError,
    UpstreamTimeout,
)

log = logging.getLogger("gateway.community")

FOUND_SECONDS = 300  # an existing invite: its counts may drift by a few minutes
MISSING_SECONDS = 300  # an unknown invite or user stays unknown
FAILURE_SECONDS = 10  # platform down or slow: long enough to shed load, short enough to recover
MAX_PARALLEL_LOOKUPS = 8
CDN_BASE = "https://cdn.discordapp.com"

GUILD_STRING_FIELDS = ("id", "name", "splash", "banner", "description", "icon", "vanity_url_code")

MESSAGES = {
    400: "The community platform rejected this invite code.",
    404: "Unknown invite: it does not exist or has expired.",
    429: "The community platform is rate limiting lookups; retry later.",
    502: "The community platform could not be reached.",
    504: "The community platform did not answer in time.",
}


class InviteFailure(Exception):
    """An invite lookup that failed; the invite operation reports it in its own body shape."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = {"Retry-After": str(retry_after)} if retry_after else {}


# ---------------------------------------------------------------- invites

def invite_for_link(link: str | None) -> dict:
    """The SPEC's invite information for a link or code; raises InviteFailure."""
    try:
        code = links.invite_code(link)
    except links.MalformedLink as exc:
        raise InviteFailure(400, str(exc)) from None
    entry = invite_entries([code])[code]
    if entry["status"] != 200:
        raise InviteFailure(entry["status"], entry["error"], retry_after=_seconds_until(entry.get("until")))
    return _with_expires_in(entry["data"])


def community_guilds() -> list[dict]:
    """The listed guilds, each with its live invite information (or the reason it is missing)."""
    guilds = list(Guild.objects.listed())
    entries = invite_entries([guild.invite_code for guild in guilds])
    listing = []
    for guild in guilds:
        entry = entries[guild.invite_code]
        found = entry["status"] == 200
        listing.append({
            "name": guild.name,
            "description": guild.description,
            "invite_code": guild.invite_code,
            "invite_url": guild.invite_url,
            "invite": _with_expires_in(entry["data"]) if found else None,
            "error": None if found else entry["error"],
        })
    return listing


def invite_entries(codes: list[str]) -> dict[str, dict]:
    """Cache entries for validated codes: one cache round trip, platform calls only for misses."""
    unique = list(dict.fromkeys(codes))
    keys = {code: f"community:invite:{code}" for code in unique}
    # A cache outage costs platform calls, never the answer.
    cached = cache_get_many(list(keys.values()), why="looking up on the platform")
    entries = {code: cached[key] for code, key in keys.items() if key in cached}
    missing = [code for code in unique if code not in entries]
    if len(missing) == 1:
        fetched = [_fetch_invite(missing[0])]
    elif missing:
        # Threads only wait on the platform; the cache and the database stay on this thread.
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_LOOKUPS, len(missing))) as pool:
            fetched = list(pool.map(_fetch_invite, missing))
    else:
        fetched = []
    for code, entry in zip(missing, fetched):
        entries[code] = entry
        cache_set(keys[code], entry, _invite_ttl(entry))
    return entries


def _fetch_invite(code: str) -> dict:
    try:
        response = client.get(f"/invites/{code}", params={"with_counts": "true", "with_expiration": "true"})
    except PlatformError as exc:
        return _failure_entry(exc)
    if response.status == 200:
        return {"status": 200, "data": invite_information(cast(dict, response.body))}  # a 200 has a JSON object
    if response.status == 404:
        return {"status": 404, "error": MESSAGES[404]}
    if response.status == 400:
        return {"status": 400, "error": MESSAGES[400]}
    # 401/403: the configured bot token was refused; the caller can do nothing about it.
    log.warning("community platform refused an invite lookup with status %s", response.status)
    return {"status": 502, "error": MESSAGES[502]}


def _failure_entry(exc: PlatformError) -> dict:
    if exc.kind == "rate_limited":
        # A rate_limited error always carries its retry_after (community.client).
        return {"status": 429, "error": MESSAGES[429], "until": time.time() + cast(int, exc.retry_after)}
    status = 504 if exc.kind == "timeout" else 502
    return {"status": status, "error": MESSAGES[status]}


def _invite_ttl(entry: dict) -> int:
    status = entry["status"]
    if status == 200:
        # Never serve an invite past its own expiry.
        remaining = _expires_in(entry["data"].get("expires_at"))
        return FOUND_SECONDS if remaining is None else max(1, min(FOUND_SECONDS, remaining))
    if status in (400, 404):
        return MISSING_SECONDS
    if status == 429:
        return cast(int, _seconds_until(entry["until"]))  # a 429 entry always has its until
    return FAILURE_SECONDS


def invite_information(raw: dict) -> dict:
    """The platform's invite object reduced to the SPEC's fields (expires_in is added on reading)."""
    guild = raw.get("guild") if isinstance(raw.get("guild"), dict) else None
    channel = raw.get("channel") if isinstance(raw.get("channel"), dict) else None
    inviter = raw.get("inviter") if isinstance(raw.get("inviter"), dict) else None
    return {
        "code": raw.get("code"),
        "type": raw.get("type"),
        "expires_at": raw.get("expires_at"),
        "member_count": raw.get("approximate_member_count"),
        "presence_count": raw.get("approximate_presence_count"),
        "guild": guild and {
            **{name: guild.get(name) for name in GUILD_STRING_FIELDS},
            "features": [feature for feature in guild.get("features") or [] if isinstance(feature, str)],
            "verification_level": guild.get("verification_level"),
        },
        "channel": channel and {name: channel.get(name) for name in ("id", "name", "type")},
        "inviter": inviter and {name: inviter.get(name) for name in ("id", "username", "global_name", "avatar")},
    }


def _with_expires_in(data: dict) -> dict:
    """Computed when answering, not when caching, so a cached invite still counts down."""
    ordered = {"code": data["code"], "type": data["type"], "expires_at": data["expires_at"],
               "expires_in": _expires_in(data["expires_at"])}
    return {**ordered, **data}


def _expires_in(expires_at) -> int | None:
    if not isinstance(expires_at, str):
        return None
    try:
        moment = datetime.fromisoformat(expires_at)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return max(0, math.floor(moment.timestamp() - time.time()))


def _seconds_until(moment: float | None) -> int | None:
    if moment is None:
        return None
    return max(1, math.ceil(moment - time.time()))


# ---------------------------------------------------------------- users

def platform_user(raw_id: str | None) -> dict:
    """A platform user (id, username, global_name, avatar URL), looked up with the bot token."""
    try:
        user_id = links.user_id(raw_id)
    except links.MalformedLink as exc:
        raise InvalidRequest(str(exc), code="missing_field" if not (raw_id or "").strip() else "invalid_value",
                             param="id") from None
    if not settings.DISCORD_BOT_TOKEN:
        raise PlatformNotConfigured("User lookup is not available: the service has no community bot token "
                                    "(DISCORD_BOT_TOKEN is not set).")
    key = f"community:user:{user_id}"
    entry = cache_get(key, why="looking up on the platform")
    if entry is None:
        entry = _fetch_user(user_id)
        cache_set(key, entry, MISSING_SECONDS)
    if entry["status"] == 404:
        raise NotFound(f"No user with id {user_id} on the community platform.", code="user_not_found", param="id")
    return entry["data"]


def _fetch_user(user_id: str) -> dict:
    try:
        response = client.get(f"/users/{user_id}")
    except PlatformError as exc:
        if exc.kind == "rate_limited":
            raise RateLimited(MESSAGES[429], retry_after=cast(int, exc.retry_after)) from None
        if exc.kind == "timeout":
            raise UpstreamTimeout(MESSAGES[504]) from None
        raise UpstreamError(MESSAGES[502]) from None
    if response.status == 200:
        return {"status": 200, "data": user_information(cast(dict, response.body))}  # a 200 has a JSON object
    if response.status in (400, 404):
        return {"status": 404}
    log.warning("community platform refused a user lookup with status %s", response.status)
    raise PlatformTokenRejected("The community platform refused the service's bot token.")


def user_information(raw: dict) -> dict:
    user_id = str(raw.get("id") or "")
    return {"id": user_id, "username": raw.get("username"), "global_name": raw.get("global_name"),
            "avatar": avatar_url(user_id, raw.get("avatar"), raw.get("discriminator"))}


def avatar_url(user_id: str, avatar: str | None, discriminator: str | None) -> str | None:
    # Only digits and hash characters go into the URL, whatever the platform sent.
    if not user_id.isdigit():
        return None
    if isinstance(avatar, str) and avatar.replace("_", "").isalnum() and avatar.isascii():
        extension = "gif" if avatar.startswith("a_") else "png"
        return f"{CDN_BASE}/avatars/{user_id}/{avatar}.{extension}"
    # No custom avatar: the platform's default one, chosen from the id (or the legacy discriminator).
    if discriminator and discriminator not in ("0", "0000") and str(discriminator).isdigit():
        index = int(discriminator) % 5
    else:
        index = (int(user_id) >> 22) % 6
    return f"{CDN_BASE}/embed/avatars/{index}.png"

