"""Idempotency-Key on the metered POST operations: a retry is charged once and answered with the first result.

- The first request with a key claims it together with its charge (gateway.metering):
  two simultaneous first attempts cannot both be charged.
- A retry while the first is in flight gets 409 idempotency_conflict; a retry with
  another body (or on another operation) 422 idempotency_mismatch.
- A retry after the first completed gets the stored response (the JSON body, the
  audio bytes, or the exact event stream that was relayed), with
  ``Idempotent-Replayed: true``. Responses larger than IDEMPOTENCY_MAX_BODY_BYTES
  are not kept: a retry of such a request gets 409 saying so, and is not charged.
- A stream the client closed after output had reached it was charged (CONTRACT section 5)
  but never finished, so there is no whole answer to replay: a retry gets 409 saying
  exactly that, and is not charged.
- A first attempt that failed was refunded and its claim released: a retry runs anew.
- Claims last IDEMPOTENCY_HOURS (24 h); after that the same key starts a new request.
"""
import hashlib
import re
from typing import cast
from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from gateway.metering import Idempotency
from keys.models import ApiKey, IdempotentRequest, LedgerEntry
from utils_app.errors import IdempotencyConflict, IdempotencyMismatch, InvalidRequest

HEADER = "Idempotency-Key"
_VALID = re.compile(r"^[\x20-\x7e]{1,255}$")
REPLAYED = {"Idempotent-Replayed": "true"}
# The status a claim records for a stream the client closed after output reached it (nginx's "client
# closed request", the usage row's status too): charged, and nothing kept to replay.
CUT_BY_CLIENT = 499
_META = "gateway.idempotency"


def from_request(request) -> Idempotency | None:
    """The request's claim, when it sent the header: the key and a digest of what it asks.

    Read once per request (the replay lookup and the charge both ask): the body is hashed once.
    """
    if _META in request.META:
        return request.META[_META]
    raw = request.META.get("HTTP_IDEMPOTENCY_KEY")
    claim = None
    if raw is not None:
        if not _VALID.match(raw):
            raise InvalidRequest(f"{HEADER} must be 1 to 255 printable ASCII characters.", param=HEADER)
        claim = Idempotency(key=raw, request_hash=hashlib.sha256(_asked(request) + request.body).hexdigest())
    request.META[_META] = claim
    return claim


def _asked(request) -> bytes:
    """The path and the query that shape the answer: Gemini's ``alt=sse`` turns a JSON array into events, so a
    retry that changes it is another request; ``alt=json`` is the default said aloud, the same request as
    none. The query's ``key`` is a secret, and the key's own claim anyway."""
    query = sorted((name, value) for name, values in request.GET.lists() if name != "key" for value in values
                   if (name, value) != ("alt", "json"))
    asked = request.path if not query else f"{request.path}?{query!r}"
    return asked.encode() + b"\n"


def expired_before():
    return timezone.now() - timedelta(hours=settings.IDEMPOTENCY_HOURS)


def previous_answer(*, key: ApiKey, claim: Idempotency) -> tuple[int, dict, bytes] | None:
    """The stored (status, headers, body) of an earlier request with this claim's key, if any."""
    record = (IdempotentRequest.objects.filter(key=key, idempotency_key=claim.key)
              .select_related("entry").only("request_hash", "response_status", "response_headers",
                                            "response_body", "created_at", "entry__status").first())
    if record is None:
        return None
    if record.created_at < expired_before():
        record.delete()
        return None
    if record.request_hash != claim.request_hash:
        raise IdempotencyMismatch(f"This {HEADER} was used with a different request; use a new key for a new "
                                  f"request.", param=HEADER)
    if record.response_status == CUT_BY_CLIENT:
        raise IdempotencyConflict(f"The request with this {HEADER} was a stream that the client closed after "
                                  f"output had reached it: it was charged, and the partial answer is not kept "
                                  f"for a replay. Send a new {HEADER} to ask again.", param=HEADER)
    if record.response_status is None:
        if record.entry.status == LedgerEntry.PENDING:
            raise IdempotencyConflict(f"A request with this {HEADER} is still in progress; retry after it "
                                      f"completes.", param=HEADER)
        raise IdempotencyConflict(f"The request with this {HEADER} completed, but its response was too large "
                                  f"to keep for a replay.", param=HEADER)
    # keep_answer stores the body with the status: a row with a status of 200 has one.
    return record.response_status, {**record.response_headers, **REPLAYED}, bytes(cast(bytes, record.response_body))


def keep_answer(*, entry: int, headers: dict, body: bytes) -> None:
    """Store a completed request's response for its retries, when it fits."""
    if len(body) > settings.IDEMPOTENCY_MAX_BODY_BYTES:
        return
    IdempotentRequest.objects.filter(entry_id=entry).update(response_status=200, response_headers=headers,
                                                            response_body=body)


def note_cut_by_client(*, entry: int) -> None:
    """Record that a charged stream was closed by its client before it ended: its retries are told so."""
    IdempotentRequest.objects.filter(entry_id=entry).update(response_status=CUT_BY_CLIENT)


_JSON = JSONRenderer()  # DRF's renderer, as the views' negotiation picks it (plain application/json)


def rendered(body: dict) -> bytes:
    """A JSON body as the response carries it (gateway.views.respond renders with this too)."""
    return _JSON.render(body)


def stored(answer, headers: dict) -> dict:
    """What a retry is answered with (``keep_answer``'s headers and body): a relayed stream's bytes, an
    operation's raw content (audio), or its JSON body as rendered; the headers with the content type."""
    if isinstance(answer, bytes):
        return {"headers": {**headers, "Content-Type": "text/event-stream; charset=utf-8"}, "body": answer}
    if answer.content is not None:
        return {"headers": {**headers, "Content-Type": answer.content_type}, "body": answer.content}
    return {"headers": {**headers, "Content-Type": "application/json"}, "body": rendered(answer.body)}
