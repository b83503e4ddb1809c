"""The ids of a request: the one the gateway makes, and the client's X-Request-ID kept beside it.

The gateway makes an id for every request (32 hex digits), and that id names the request
everywhere: the X-Request-ID answer header, every log line, the ledger charge row, the usage
record and the upstream call. A client's own X-Request-ID cannot be that name: any client
may send any value, so records of different requests (of different keys, even) would share
one, and a client could make its request look like another's. When it is a sane token it is
kept beside the gateway's id instead: answered as X-Client-Request-ID and written on the
request's summary line, so either id leads to the other.
"""
import re
import uuid

_SANE = re.compile(r"^[\x21-\x7e]{1,128}$")  # printable ASCII without spaces, at most 128 characters
_META = "gateway.request_id"


def request_id(request) -> str:
    """The gateway's id of the request, the same for its whole life (``request`` may be Django's or DRF's)."""
    meta = request.META
    found = meta.get(_META)
    if found is None:
        found = meta[_META] = uuid.uuid4().hex
    return found


def client_request_id(request) -> str:
    """The client's own X-Request-ID when it is a sane token, else ""."""
    offered = request.META.get("HTTP_X_REQUEST_ID", "")
    return offered if _SANE.match(offered) else ""
