"""Turning what clients send (invite links, user ids) into validated platform identifiers.

Everything here is pure and strict: a value either becomes a code or id made of
safe characters only, or is refused, so nothing a client sends ever reaches an
upstream URL unescaped.
"""
import re
from urllib.parse import urlsplit

# Generated invite codes are letters and digits; vanity codes may add hyphens.
INVITE_CODE_RE = re.compile(r"[A-Za-z0-9-]{2,32}")
# Snowflakes are unsigned 64-bit integers: at most 20 digits, in practice at least 15.
USER_ID_RE = re.compile(r"[0-9]{15,20}")
MAX_LINK_LENGTH = 200

# Host (without "www.") -> the path segments that precede the code.
INVITE_HOSTS = {
    "discord.gg": (),
    "discord.com": ("invite",),
    "discordapp.com": ("invite",),
}


class MalformedLink(ValueError):
    """The value is neither an invite code nor a recognised invite link."""


NOT_AN_INVITE = "'link' is not an invite link (discord.gg/CODE or discord.com/invite/CODE) or an invite code."


def invite_code(link: str | None) -> str:
    """The invite code in a bare code or in any accepted link form.

    Accepted: ``CODE``, ``discord.gg/CODE``, ``discord.com/invite/CODE``,
    ``discordapp.com/invite/CODE``, each with or without ``http(s)://`` and
    ``www.``, a query string, a fragment or one trailing slash; surrounding
    spaces are ignored.
    """
    value = (link or "").strip()
    if not value:
        raise MalformedLink("Missing 'link': send an invite link or code.")
    if len(value) > MAX_LINK_LENGTH:
        raise MalformedLink(f"'link' is longer than {MAX_LINK_LENGTH} characters.")
    if INVITE_CODE_RE.fullmatch(value):
        return value

    try:
        parts = urlsplit(value if "://" in value else f"https://{value}")
    except ValueError:  # e.g. an unbalanced "[" that urlsplit reads as an IPv6 host
        raise MalformedLink(NOT_AN_INVITE) from None
    # netloc rather than hostname: a port or user:password@ is not an invite link.
    host = parts.netloc.lower().removeprefix("www.")
    if parts.scheme.lower() not in ("http", "https") or host not in INVITE_HOSTS:
        raise MalformedLink(NOT_AN_INVITE)
    path = parts.path[:-1] if parts.path.endswith("/") else parts.path
    segments = path.split("/")[1:]
    expected = INVITE_HOSTS[host]
    if len(segments) != len(expected) + 1 or tuple(segment.lower() for segment in segments[:-1]) != expected:
        raise MalformedLink(NOT_AN_INVITE)
    code = segments[-1]
    if not INVITE_CODE_RE.fullmatch(code):
        raise MalformedLink("The invite code in 'link' may only contain letters, digits and hyphens "
                            "(2 to 32 characters).")
    return code


def user_id(value: str | None) -> str:
    """A platform user id (snowflake) as a string of digits."""
    value = (value or "").strip()
    if not value:
        raise MalformedLink("Missing 'id': send the user's numeric id.")
    if not USER_ID_RE.fullmatch(value) or int(value) >= 2 ** 64:
        raise MalformedLink("'id' must be a numeric user id (15 to 20 digits).")
    return value
