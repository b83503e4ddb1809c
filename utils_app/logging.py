"""What the logs say about a request: its id on every line, and one summary line when it ends.

The request id lives in a context variable set by utils_app.middleware.RequestIdMiddleware.
A context variable, not a thread-local or an attribute of the request, because a log
line is written far from any request object (the upstream client, the metering), and
because it is right under both of the service's worker kinds: gthread workers run one
request per thread, and gevent, whose greenlets each have their own context, runs one
per greenlet. Threads the service starts itself (the ledger sweeper) begin with an
empty context, so their lines carry no request's id.

``RequestLine`` gathers what the summary line reports as the request goes on (the
metering fills in the model, tokens and credits; every error answer its reason); the
middleware writes it once, when the response has been sent, or for a stream when the
stream ends. It is the service's access log: one line per request, which names the
route, never the path or its query string (a media file's name is its credential; a
query may carry anything). Only the key's display prefix is ever in it, never the secret.
"""
import contextvars
import json
import logging
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

log = logging.getLogger("gateway.requests")


@dataclass
class RequestLine:
    request_id: str
    client_request_id: str = ""  # the client's own X-Request-ID, kept beside ours (utils_app.middleware)
    method: str = ""
    operation: str = ""  # the route's name: a bounded set
    model: str = ""  # a catalog model id, once the request resolved one
    key: str = ""  # the key's display prefix
    status: int | None = None  # a failure's status, set by the metering (a stream already answered 200)
    client: str = ""  # the client's address, as the per-address limits count it
    credits: int = 0  # credits the request was charged for good (refunds leave 0)
    input_tokens: int = 0
    output_tokens: int = 0
    upstream_seconds: float = 0.0
    attempts: list = field(default_factory=list)  # failed attempts at deployments: "provider#id:code"
    ignored: list = field(default_factory=list)  # what the deployment that answered could not honour (X-Gateway-Ignored)
    error: str = ""  # the reason of a refusal or failure: its code and message (record_error)
    started: float = field(default_factory=time.perf_counter)

    def fields(self, status: int, *, sent: int | None = None) -> dict:
        return {"client_request_id": self.client_request_id or None, "key": self.key, "method": self.method,
                "operation": self.operation, "model": self.model, "status": status, "credits": self.credits,
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "upstream_ms": round(self.upstream_seconds * 1000, 1),
                "total_ms": round((time.perf_counter() - self.started) * 1000, 1), "bytes": sent,
                "client": self.client, "error": self.error if self.error and status >= 400 else None,
                **({"failed_attempts": list(self.attempts)} if self.attempts else {}),
                **({"ignored": list(self.ignored)} if self.ignored else {})}


_current: contextvars.ContextVar[RequestLine | None] = contextvars.ContextVar("gateway_request", default=None)


def begin(request_id: str, *, method: str = "", client_request_id: str = "") -> RequestLine:
    """Start the line of a new request in the current context (the request's thread or greenlet)."""
    line = RequestLine(request_id=request_id, client_request_id=client_request_id, method=method)
    # Not reset when the request ends: Django logs a failed request's status after the
    # middleware returned, and that line should carry the id too. The next request replaces it.
    _current.set(line)
    return line


def current() -> RequestLine | None:
    return _current.get()


def current_request_id() -> str:
    """The id of the request being served here, or "" outside any request."""
    line = _current.get()
    return line.request_id if line is not None else ""


# What of an error's message the summary keeps: one line (no control characters a client could use
# to forge another log line), and not a whole essay.
MAX_ERROR_CHARS = 300
# The client's address is X-Forwarded-For's text behind a trusted proxy that passes it on as written; an
# address, IPv6 with a zone included, is far shorter.
MAX_CLIENT_CHARS = 100
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def one_line(text: str) -> str:
    """``text`` with each run of control characters (line breaks, escape sequences, NUL…) made one space:
    what a log line, a table row or an event's name may show of text someone else wrote, so that the
    text cannot end the line and write one of its own."""
    return _CONTROL.sub(" ", text)


def record_error(code: str | None, message: str) -> None:
    """The reason of the error answer being built (errors.GatewayError.body), for the request's summary
    line; a request that ends well after all (status below 400) is not said to have failed.

    The message is the one the client gets (GatewayError messages are written to be safe to
    show, secrets scrubbed from any upstream text), so it is safe for the log too, and the
    operator reads what the client read.
    """
    line = _current.get()
    if line is not None:
        line.error = one_line(f"{code}: {message}" if code else message)[:MAX_ERROR_CHARS]


def write(line: RequestLine, status: int, *, sent: int | None = None) -> None:
    """The request's one summary line, under its own id whatever the context holds when a stream ends.

    ``sent`` is the bytes of the body sent (None when unknown, as for a file of unknown length).
    """
    if not log.isEnabledFor(logging.INFO):
        return
    fields = line.fields(status, sent=sent)
    args = (fields["method"], fields["operation"] or "-", fields["model"] or "-", status, fields["credits"],
            fields["input_tokens"], fields["output_tokens"], fields["upstream_ms"], fields["total_ms"],
            fields["key"] or "-", "-" if sent is None else sent,
            one_line(fields["client"])[:MAX_CLIENT_CHARS] or "-",
            f" failed_attempts={one_line(','.join(line.attempts))}" if line.attempts else "",
            f" ignored={one_line(','.join(line.ignored))}" if line.ignored else "",
            f" client_request_id={line.client_request_id}" if line.client_request_id else "",
            f' error="{fields["error"]}"' if fields["error"] else "")
    # The record log.info() would make, made directly: logging's search of the stack for the caller
    # (findCaller, a tenth of the line's cost) always found this function, so its place is given.
    record = log.makeRecord(log.name, logging.INFO, _HERE.co_filename, _HERE.co_firstlineno, _SUMMARY, args, None,
                            "write", {"request_fields": fields, "request_id": line.request_id})
    log.handle(record)


_SUMMARY = "%s %s %s %s credits=%s tokens=%s/%s upstream=%sms total=%sms key=%s bytes=%s client=%s%s%s%s%s"
_HERE = write.__code__


class SummarisedResponses(logging.Filter):
    """On Django's "django.request" logger: drops its "Bad Gateway: /v1/…" line for an error answer.

    Every request's summary line already says it, with the reason, which Django's line lacks. A
    record that carries an exception (an uncaught error's traceback) is kept: it is the only one.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.exc_info is not None or not hasattr(record, "status_code")


class RequestIdFilter(logging.Filter):
    """Puts the current request's id on every record a handler writes ("-" outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_request_id() or "-"
        return True


def _request_id_of(record: logging.LogRecord) -> str | None:
    found = getattr(record, "request_id", None)
    if found is None:  # a handler without RequestIdFilter
        found = current_request_id()
    return found if found and found != "-" else None


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, request id, message, and the summary's fields.

    Only those: attributes other code puts on a record (Django adds the whole request
    object to its own) are left out, so nothing a client sent ends up in the logs by accident.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "request_id": _request_id_of(record),
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "request_fields", None) or {})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)
