"""The id of a request: the client's X-Request-ID when it is a sane token, else a new one."""
import re
import uuid

_SANE = re.compile(r"^[\x21-\x7e]{1,128}$")  # printable ASCII without spaces, at most 128 characters
_META = "gateway.request_id"


def request_id(request) -> str:
    """The same id for the whole life of one request (``request`` may be Django's or DRF's)."""
    meta = request.META
    found = meta.get(_META)
    if found is None:
        offered = meta.get("HTTP_X_REQUEST_ID", "")
        found = meta[_META] = offered if _SANE.match(offered) else uuid.uuid4().hex
    return found
