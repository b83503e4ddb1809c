"""Images fetched by URL: what an image URL may point at (public addresses only, or the provider's own
host for an image its upstream handed out), what the bytes are, and the process's heap handed back
after requests that fetched several megabytes of them. HttpTransport.fetch_image does the fetching."""
import ctypes
import ctypes.util
import ipaddress
import socket
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import SplitResult, urlsplit

from django.core.signals import request_finished

from utils_app.errors import UpstreamError


def check_image_url(url: str, *, name: str, base_url: str, client: bool = False) -> None:
    """Refuse an image URL that would make the gateway fetch from inside its own network.

    The upstream chooses the URL (and every redirect), so without this check it could
    aim the gateway at a loopback or private address. The provider's own host is
    trusted like the provider itself (a self-hosted upstream may live on one) for the
    upstream's own image URLs; a client's URL (``client``) is trusted nowhere: every hop
    must be on a public address, the provider's host included, or a client could make
    the gateway read any path of a provider on a private network.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UpstreamError(f"The upstream provider '{name}' sent an unusable image URL.")
    if not client and _origin(parts) == _origin(urlsplit(base_url)):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = {cast(str, info[4][0])  # for IPv4 and IPv6, getaddrinfo gives the address as a str
                     for info in socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)}
    except (OSError, ValueError, UnicodeError):
        raise UpstreamError(f"The image host of provider '{name}' could not be resolved.") from None
    if not all(is_public(address) for address in addresses):
        raise UpstreamError(f"The upstream provider '{name}' pointed an image at an address this gateway "
                            f"does not fetch from.")


def image_type(content: bytes) -> str:
    """The content type of image bytes, from their signature (upstream headers are often generic)."""
    if content.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if content.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if content[:4] == b"RIFF" and content[8:12] == b"WEBP":
        return "image/webp"
    if content[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    raise UpstreamError("The upstream sent image data in an unknown format.")


def _origin(parts: SplitResult) -> tuple[str, str, int]:
    try:
        port = parts.port
    except ValueError:
        port = None
    return (parts.scheme, (parts.hostname or "").lower(), port or (443 if parts.scheme == "https" else 80))


def is_public(address: str) -> bool:
    """Whether an IP address is on the public internet (not loopback, private, link-local, reserved…)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone index is not part of the address
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)  # an IPv6 address may carry an IPv4 one
    if mapped:
        ip = mapped
    return ip.is_global and not ip.is_multicast


# ---------------------------------------------------------------- memory after large fetches

# Bytes of client images fetched by this process since its heap was last handed back (give_back_memory).
_fetched_bytes = 0
# After this many, the end of the request hands the process's free heap back to the system.
GIVE_BACK_AFTER_BYTES = 4 * 1024 * 1024


def note_fetched(size: int) -> None:
    """Count a fetched image; past GIVE_BACK_AFTER_BYTES, the end of the request gives the heap back
    (``give_back_memory`` is connected then, so a request that fetched nothing runs none of this)."""
    global _fetched_bytes
    _fetched_bytes += size
    if _fetched_bytes >= GIVE_BACK_AFTER_BYTES and _trim is not None:
        request_finished.connect(give_back_memory, dispatch_uid=_GIVE_BACK)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None).malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to call
        return None


_trim = _malloc_trim()


def give_back_memory(**_: Any) -> None:
    """At the end of a request, once images of several megabytes were fetched (and dropped): give the
    freed heap back to the system.

    An image goes through a few copies (the bytes, base64, the JSON sent upstream), each freed
    when the call is over; but glibc keeps freed blocks below its mmap threshold in the heap, and
    raises that threshold (up to 32 MiB) after freeing a larger block, so a worker that once held a
    request's images stayed that large. ``malloc_trim`` hands the free pages back; the work is a
    walk over the heap, done only after such requests. Elsewhere (no glibc) nothing happens.
    """
    global _fetched_bytes
    request_finished.disconnect(dispatch_uid=_GIVE_BACK)  # until the next fetches add up again
    if _fetched_bytes < GIVE_BACK_AFTER_BYTES or _trim is None:
        return
    _fetched_bytes = 0
    _trim(0)


_GIVE_BACK = "gateway.upstream.images.give_back_memory"
