"""An upstream's event stream read as it arrives: the data of each server-sent event, within the
stream's time limits and byte cap, and the socket's timeout narrowed before each read so a body
that drips a byte at a time still meets its deadline (HttpTransport.read uses the same)."""
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from django.conf import settings

from utils_app.errors import StreamTooLong
from utils_app.http import TRANSPORT_ERRORS

if TYPE_CHECKING:
    from gateway.upstream.transport import HttpTransport, Response

READ_BLOCK = 65536
# How long a finished stream waits for the end of its upstream body before dropping the connection.
STREAM_END_SECONDS = 1.0


def wait_at_most(response: "Response", seconds: float) -> None:
    """Make the next read on the response's socket give up after ``seconds``.

    requests sets one timeout per read when the request starts; a body dripping a
    byte just inside it would never time out. Narrowing the socket's timeout before
    each read to the time left is what makes the budget a budget.
    """
    connection = getattr(response.raw, "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        sock.settimeout(max(seconds, 0.001))


class EventStream:
    """The data of each server-sent event of an upstream answer, as soon as its blank line arrives.

    read1 returns whatever bytes have arrived (up to 64 KiB) instead of waiting for a full
    buffer, for chunked and close-delimited bodies alike: this is what keeps the relay event
    by event. Each read waits at most the provider's timeout (a silent upstream) and never
    past STREAM_MAX_SECONDS from the start; one event may not grow past UPSTREAM_MAX_BYTES.
    Call ``finished()`` once the protocol's last event arrived: ``close()`` then reads the
    body's end, so the connection goes back to the pool for the next call.
    """

    def __init__(self, transport: "HttpTransport", response: "Response"):
        self.transport = transport
        self.response = response
        self.ends = time.monotonic() + settings.STREAM_MAX_SECONDS
        self._finished = False

    def __iter__(self) -> Iterator[str]:
        response, transport = self.response, self.transport
        buffer = b""
        data: list[str] = []
        pending = 0  # bytes of the event being assembled
        while True:
            left = self.ends - time.monotonic()
            if left <= 0:
                raise self._too_long()
            wait_at_most(response, min(transport.timeout, left))
            try:
                block = response.raw.read1(READ_BLOCK)
            except TRANSPORT_ERRORS as exc:
                if self.ends - time.monotonic() <= 0:
                    raise self._too_long() from None
                raise transport.transport_error(exc, seconds=transport.timeout) from None
            if not block:
                break
            pending += len(block)
            if pending > settings.UPSTREAM_MAX_BYTES:
                raise transport.too_large(settings.UPSTREAM_MAX_BYTES)
            *lines, buffer = (buffer + block).split(b"\n")
            for line in lines:
                line = line.rstrip(b"\r")
                if not line:
                    if data:
                        yield "\n".join(data)
                        data = []
                    pending = len(buffer)
                elif line.startswith(b"data:"):
                    value = line[5:]
                    data.append((value[1:] if value.startswith(b" ") else value).decode("utf-8", "replace"))
        if buffer.startswith(b"data:"):
            data.append(buffer[5:].strip().decode("utf-8", "replace"))
        if data:
            yield "\n".join(data)

    def _too_long(self) -> StreamTooLong:
        return StreamTooLong(f"The stream was ended after {settings.STREAM_MAX_SECONDS:g} seconds, the longest "
                             f"this gateway relays one.")

    def finished(self) -> None:
        self._finished = True

    def close(self) -> None:
        """Drop the connection, or after a finished stream read the body's end first.

        Only its end (a chunked body's last, empty chunk) is read: urllib3 then gives the
        connection back to the pool, and the next call skips a new connection (and TLS
        handshake). Anything else, or nothing within STREAM_END_SECONDS, and the connection is
        dropped instead, as for a stream the client left early (which the upstream must see
        closed, to stop generating). The client has its last event already: the WSGI server
        closes the body after sending it.
        """
        if self._finished:
            try:
                wait_at_most(self.response, STREAM_END_SECONDS)
                self.response.raw.read1(READ_BLOCK)
            except TRANSPORT_ERRORS:
                pass
        self.response.close()
