"""What the fake providers (azure_fake, gemini_fake, anthropic_fake) share: a threaded HTTP/1.1 server
on 127.0.0.1, JSON answers, and event streams sent chunked as they are produced, which a test can hold
(``Gate``) or cut off mid-way (``DROP``)."""
import json
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DROP = "drop"  # close the connection in the middle of a stream


@dataclass
class Gate:
    """A stream step that holds the rest of the stream until the test opens it; records whether it was
    opened in time (the client had the events before it)."""

    timeout: float = 10.0
    event: threading.Event = field(default_factory=threading.Event)
    opened_in_time: bool | None = None

    def open(self):
        self.event.set()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class FakeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def read_json(self):
        """The request's JSON body; None when it is not JSON."""
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def send_body(self, status: int, content: bytes | dict, content_type: str = "application/json",
                  headers: dict | None = None):
        """One whole answer: bytes as they are, anything else as JSON."""
        if not isinstance(content, bytes):
            content = json.dumps(content).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(content)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(content)

    def send_events(self, status: int, events: list, encode: Callable[[object], bytes],
                    content_type: str = "text/event-stream; charset=utf-8"):
        """A stream, each event chunked and flushed as it is encoded; a Gate waits, DROP cuts the
        connection (no closing chunk), a client that left ends it quietly."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                if isinstance(event, Gate):
                    event.opened_in_time = event.event.wait(event.timeout)
                    continue
                if event == DROP:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                data = encode(event)
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class FakeServer:
    """A fake provider's server, serving ``handler`` in a thread of its own once started."""

    def serve(self, handler: type[FakeHandler]) -> None:
        self.server = _QuietServer(("127.0.0.1", 0), handler)
        # A short poll: stop() waits for the loop to notice, once per test.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
