"""What the fake providers (azure_fake, gemini_fake, anthropic_fake) share: a threaded HTTP/1.1 server
on 127.0.0.1, JSON answers, and event streams sent chunked as they are produced, which a test can hold
(``Gate``) or cut off mid-way (``DROP``); and the hostile text an upstream may send back (``quoted_back``,
``FORGED_LINE``)."""
import base64
import json
import re
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DROP = "drop"  # close the connection in the middle of a stream

# What a hostile upstream puts in a string it expects the gateway to write into a log line or a table
# (an error code, a message): a line break, then a line of its own making.
FORGED_LINE = "\n2026-01-01 00:00:00,000 INFO gateway.requests [forged] POST chat-completions - 200 credits=0"


def _b64(raw: bytes, *, urlsafe: bool = False) -> str:
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(raw).decode()


def quoted_back(secret: str, host: str) -> dict[str, str]:
    """The ways an upstream has been seen, or could choose, to quote back the credential it was sent and its
    own address (``host``: host:port as the gateway's Host header named it), each an error message: every
    one must reach neither the client nor the log."""
    raw = secret.encode()
    return {
        "base64": f"invalid key (base64 {_b64(raw)})",
        "base64 urlsafe, unpadded": f"token={_b64(raw, urlsafe=True).rstrip('=')} rejected",
        "base64, wrapped": "credential:\r\n" + "\r\n".join(re.findall(".{1,16}", _b64(raw))),
        # A Basic header's base64 holds the secret after a user name: at each of the 3 byte alignments.
        "basic, at a group's start": f"Authorization: Basic {_b64(b'id:' + raw + b'!')}",
        "basic, 1 byte into a group": f"Authorization: Basic {_b64(b'api:' + raw + b'!')}",
        "basic, 2 bytes into a group": f"Authorization: Basic {_b64(b'user:' + raw + b'?x')}",
        "percent-encoded": "GET /v1?key=" + "".join(f"%{byte:02X}" for byte in raw) + " denied",
        "percent-encoded, lower case": "key%3D" + "".join(f"%{byte:02x}" for byte in raw),
        "upper case": f"KEY {secret.upper()} IS NOT VALID",
        "lower case": f"key {secret.lower()} is not valid",
        "json escapes": "key " + "".join(f"\\u{ord(character):04x}" for character in secret),
        "split by a line break": f"key {secret[:9]}\n{secret[9:]} refused",
        "split by spaces": "key " + " ".join(secret[at:at + 5] for at in range(0, len(secret), 5)),
        "split by quotes": f'key "{secret[:7]}" "{secret[7:20]}" + "{secret[20:]}"',
        "host and port": f"connect to {host} failed",
        "host, upper case": f"upstream {host.upper()} overloaded",
        "base URL, upper case": f"see HTTP://{host.upper()}/V1/MESSAGES",
        "host name alone": f"no route to {host.rsplit(':', 1)[0]}",
    }


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
    # Headers and body go out in two writes: with Nagle's algorithm the second waits for the client's
    # delayed acknowledgement of the first (about 40 ms an answer).
    disable_nagle_algorithm = True

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


# ---------------------------------------------------------------- an OpenAI chat upstream with OpenAI's limits

class FakeOpenAI(FakeServer):
    """``POST /v1/chat/completions`` as OpenAI answers it under load, the behaviours a client's request can
    provoke, each a mode a test turns on:

    - ``tpm``: a tokens-per-minute budget, counted as OpenAI's limiter counts a request (a token per four
      characters of the body, plus ``max_tokens`` times ``n``, whether or not they are written). A request
      larger than the whole budget gets OpenAI's 429 "Request too large" (type ``tokens``); one larger than
      what is left of it, OpenAI's 429 "Rate limit reached". Both carry the ``x-ratelimit-*-tokens`` headers.
      The budget does not refill by itself: ``refill()`` starts a new minute.
    - ``seconds_per_token``: an answer takes as long as writing every token ``max_tokens`` allows (16 when
      the request sets none); ``hang``: no answer at all, the connection held open (a deployment that is
      dead behind a live socket). Either ends at ``stop()``.
    - ``echo``: a 400 whose message quotes the request's text back, as upstreams quote a field they refuse,
      with the error ``type`` and ``code`` the test gives (``None``: as OpenAI's 400s have them).
    """

    def __init__(self, text: str = "Hello from OpenAI"):
        self.text = text
        self.calls: list[dict] = []
        self.tpm: int | None = None
        self.used = 0
        self.seconds_per_token = 0.0
        self.hang = False
        self.echo: tuple[str | None, str | None] | None = None
        self.release = threading.Event()
        fake = self

        class Handler(FakeHandler):
            def do_POST(self):
                body = self.read_json()
                if not isinstance(body, dict) or self.path != "/v1/chat/completions":
                    return self.send_body(404, {"error": {"message": "Not found", "type": "invalid_request_error",
                                                          "param": None, "code": None}})
                fake.calls.append(body)
                if fake.echo is not None:
                    kind, code = fake.echo
                    return self.send_body(400, {"error": {"message": f"Invalid content: {_said(body)}",
                                                          "type": kind or "invalid_request_error", "param": None,
                                                          "code": code}})
                refused = fake._over_budget(body)
                if refused:
                    return self.send_body(429, refused[0], headers=refused[1])
                if fake.hang:
                    fake.release.wait(60)
                else:
                    fake.release.wait(fake.seconds_per_token * _output(body, default=16))
                try:
                    self.send_body(200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000,
                                         "model": body.get("model"), "choices": [
                                             {"index": 0, "message": {"role": "assistant", "content": fake.text},
                                              "logprobs": None, "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}})
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the gateway stopped waiting

        self.serve(Handler)

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def stop(self):
        self.release.set()
        super().stop()

    def refill(self):
        self.used = 0

    def _over_budget(self, body: dict) -> tuple[dict, dict] | None:
        if self.tpm is None:
            return None
        requested = -(-len(json.dumps(body)) // 4) + _output(body, default=0)
        headers = {"x-ratelimit-limit-tokens": str(self.tpm),
                   "x-ratelimit-remaining-tokens": str(self.tpm - self.used), "x-ratelimit-reset-tokens": "60s"}
        model = body.get("model")
        if requested > self.tpm:
            message = (f"Request too large for {model} in organization org-fake on tokens per min (TPM): "
                       f"Limit {self.tpm}, Requested {requested}. The input or output tokens must be reduced in "
                       f"order to run successfully.")
        elif requested > self.tpm - self.used:
            message = (f"Rate limit reached for {model} in organization org-fake on tokens per min (TPM): "
                       f"Limit {self.tpm}, Used {self.used}, Requested {requested}. Please try again in 1s.")
        else:
            self.used += requested
            return None
        return {"error": {"message": message, "type": "tokens", "param": None, "code": "rate_limit_exceeded"}}, headers


def _output(body: dict, *, default: int) -> int:
    limit = body.get("max_completion_tokens") or body.get("max_tokens") or default
    return limit * (body.get("n") or 1)


def _said(body: dict) -> str:
    """The text of a chat request's messages, as an upstream quoting the request writes it."""
    return " ".join(str(message.get("content")) for message in body.get("messages") or () if isinstance(message, dict))
