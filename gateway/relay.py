"""A streamed chat on its way to the client: upstream chunks relayed as they arrive, framed as server-sent
events, the reply's tokens counted, and the meter settled when the stream ends or the client leaves."""
import json
import re
from collections.abc import Generator, Iterator

from django.conf import settings

from gateway import deployment_health, metering
from gateway.tokens import count_tokens
from gateway.pipeline import CLIENT_CLOSED, Meter
from gateway.prices import cached_tokens, ledger_tokens, metered_usage
from gateway.upstream.shapes import ChunkStream, prompt_text
from utils_app import metrics
from utils_app.error_handler import as_gateway_error
from utils_app.errors import GatewayError, failure_kind


class ClientClosed(GatewayError):
    """The client went away before anything was sent to it: nothing delivered, nothing charged."""

    status = CLIENT_CLOSED
    type = "invalid_request_error"
    code = "client_closed_request"


def _event(payload) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


class OpenAIEvents:
    """How a streamed chat reaches the client on /v1/chat/completions: each chunk as a ``data:`` event,
    an error as one more, then ``[DONE]``. gateway.messages has Anthropic's for /v1/messages."""

    def chunk(self, chunk: dict) -> bytes:
        return _event(chunk)

    def error(self, error: GatewayError) -> bytes:
        return _event(error.body()) + DONE

    def end(self) -> bytes:
        return DONE

    def kept(self) -> metering.Also | None:
        """A row the stream's settlement also writes (the Responses API's stored response); none here."""
        return None


class ReplyTokens:
    """The token count (gateway.tokens.count_tokens) of a streamed reply's text, counted as it arrives.

    Text is counted in pieces of about FLUSH_CHARS, each cut just after a character that is no
    part of a word (a space or a punctuation mark, which no token crosses), so the sum is the count
    of the whole text; only the unfinished end is held. A piece without any such character (one
    endless "word") is counted as it is.
    """

    FLUSH_CHARS = 16384
    _LAST_BREAK = re.compile(r"\W\w*\Z")

    def __init__(self):
        self.counted = 0
        self.pending: list[str] = []
        self.size = 0
        self.seen = False  # any text at all: a text of only spaces still counts one token

    def add(self, text: str) -> None:
        if not text:
            return
        self.seen = True
        self.pending.append(text)
        self.size += len(text)
        if self.size >= self.FLUSH_CHARS:
            held = "".join(self.pending)
            found = self._LAST_BREAK.search(held)
            cut = found.start() + 1 if found else len(held)
            self.counted += self._count(held[:cut])
            self.pending = [held[cut:]] if cut < len(held) else []
            self.size = len(held) - cut

    @staticmethod
    def _count(text: str) -> int:
        return count_tokens(text) if text and not text.isspace() else 0

    def tokens(self) -> int:
        total = self.counted + self._count("".join(self.pending))
        return total or (1 if self.seen else 0)


class ChatRelay:
    """The body of a streamed chat response: upstream chunks relayed one by one as they arrive.

    It settles the meter when the stream ends: success with the upstream's usage;
    on an upstream failure after the first byte, a refund and one error event
    followed by [DONE]. The WSGI server calls ``close()`` when the client goes
    away (or the response ends), which closes the upstream connection too.
    With an Idempotency-Key the relayed events are kept, so a retry is answered with the
    very same stream, until they pass IDEMPOTENCY_MAX_BODY_BYTES: then none is kept (a
    retry is told the answer was too large to keep). Of the text only a running token
    count is kept (``ReplyTokens``): a stream of any length holds a bounded amount.
    """

    def __init__(self, *, meter: Meter, upstream: ChunkStream, include_usage: bool, messages: list,
                 events: OpenAIEvents | None = None):
        self._meter = meter
        self._events_out = events or OpenAIEvents()
        self._ended = False  # the stream's last event was written: its end, or an error
        self._upstream = upstream
        self._include_usage = include_usage
        self._messages = messages
        self._usage: dict = {}
        self._reply = ReplyTokens()  # the estimate of the output, should the upstream report no usage
        self._sent: list[bytes] | None = [] if meter.claim else None
        self._sent_bytes = 0
        self._delivered = False  # whether an event was handed to the server for the client
        self._events = self._counted(self._relay())

    def __iter__(self) -> Iterator[bytes]:
        return self._events

    @staticmethod
    def _counted(events: Iterator[bytes]) -> Generator[bytes, None, None]:
        # Open from its first event until it ends or is closed (a stream never started was never open).
        metrics.OPEN_STREAMS.inc()
        try:
            yield from events
        finally:
            metrics.OPEN_STREAMS.dec()

    def _relay(self) -> Iterator[bytes]:
        model_id = self._meter.model_name
        try:
            for chunk in self._upstream:
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") if isinstance(choice, dict) else None
                    if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                        self._reply.add(delta["content"])
                usage = chunk.get("usage")
                if isinstance(usage, dict):
                    self._usage = usage
                    # Shown with the counts the settlement records (the usage chunk comes last).
                    usage = chunk["usage"] = self._metered(usage)
                if not self._include_usage:
                    if usage and not chunk.get("choices"):
                        continue  # the usage-only chunk the gateway asked for on its own account
                    chunk.pop("usage", None)
                chunk["model"] = model_id
                self._delivered = True
                event = self._events_out.chunk(chunk)
                if event:
                    yield self._keep(event)
        except Exception as exc:  # the client already has a 200: the error can only be an event now
            error = as_gateway_error(exc)
            metrics.upstream_failed(provider=self._meter.provider, kind=failure_kind(exc))
            if self._meter.deployment is not None:
                # After the commit point it still counts against the deployment.
                deployment_health.failed(self._meter.deployment, exc)
            self._upstream.close()
            # The stream passed its commit point before the gateway answered (upstream.ChunkStream),
            # so the client has output: the charge stands, and the usage row says how it ended.
            ending = self._keep(self._events_out.error(error))
            self._ended = True
            self._settle(status=error.status, complete=False)
            yield ending
            return
        ending = self._keep(self._events_out.end())
        self._ended = True
        self._settle()
        yield ending

    def _keep(self, event: bytes) -> bytes:
        if self._sent is not None:
            self._sent_bytes += len(event)
            if self._sent_bytes > settings.IDEMPOTENCY_MAX_BODY_BYTES:
                self._sent = None  # too large to be stored for a replay: not held any longer either
            else:
                self._sent.append(event)
        return event

    def _counts(self, usage: dict) -> tuple[int, int, int]:
        """(input, output, cached) as the ledger keeps them: the upstream's usage, else the estimates."""
        input_tokens = ledger_tokens(usage, "prompt_tokens", lambda: count_tokens(prompt_text(self._messages)))
        return (input_tokens, ledger_tokens(usage, "completion_tokens", self._reply.tokens),
                min(cached_tokens(usage), input_tokens))

    def _metered(self, usage: dict) -> dict:
        input_tokens, output_tokens, cached = self._counts(usage)
        cost = self._meter.price(input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached)
        return metered_usage(usage, input_tokens=input_tokens, output_tokens=output_tokens, cached=cached, cost=cost)

    def _settle(self, *, status: int = 200, complete: bool = True) -> None:
        """Charge the stream: ``complete`` when the upstream finished it, else ``status`` says how it ended."""
        input_tokens, output_tokens, cached = self._counts(self._usage)
        self._meter.succeed(
            input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached,
            answer=b"".join(self._sent) if self._sent and self._ended else None,
            status=status, upstream_success=complete, also=self._events_out.kept())

    def close(self) -> None:
        try:
            self._events.close()  # GeneratorExit at the paused yield, if the stream was started
        finally:
            self._upstream.close()
            if not self._meter.settled:
                if self._delivered:
                    # The client left after output reached it. The upstream did the work up to here,
                    # so the charge stands and the tokens relayed so far are recorded.
                    self._settle(status=CLIENT_CLOSED)
                else:
                    self._meter.fail(ClientClosed("The client closed the connection before the stream began."))
