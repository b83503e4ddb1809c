"""Malformed answers from every kind of upstream, generated: at each member of a valid answer (or of one
event of a valid stream) another JSON value, or the member left out, driven through each inbound API
that reads that answer. Whatever the upstream sends, the client gets an answer or an error in its API's
shape (a 5xx only as 502, 503 or 504), never a trace, and the ledger reconciles (CONTRACT sections 5, 6).

The cases are drawn with a fixed seed from all the substitutions, a few at each member, so a run is the
same every time."""
import copy
import json
import random

import pytest
from django.core.cache import cache

from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from models_catalog.models import Provider
from tests.gateway import anthropic_fake, gemini_fake
from tests.gateway.conftest import (
    ANTHROPIC,
    GOOGLE,
    OPENAI,
    UPSTREAM_KEY_ENV,
    UPSTREAM_SECRET,
    chat_completion,
    chunk,
    in_error_shape,
    serve,
    usage_chunk,
)
from utils_app import state

pytestmark = pytest.mark.django_db

SEED = 20240611
PER_MEMBER = 3  # substitutes drawn for each member of each valid answer
# A lone surrogate and a NUL: strings that no UTF-8, or no jsonb column, can hold as they are.
VALUES = [None, True, 0, -1, 1.5, 2**70, "", "x", [], {}, [None], [5], {"a": 1}, "\ud800", "a\x00b"]
LEFT_OUT = object()
HELLO = [{"role": "user", "content": "Hello"}]


# ---------------------------------------------------------------- valid answers, one per reader

def tool_completion() -> dict:
    answer = chat_completion()
    answer["choices"][0]["message"]["tool_calls"] = [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]
    answer["choices"][0]["logprobs"] = {"content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105],
                                                     "top_logprobs": []}]}
    return answer


def chat_stream() -> list:
    opening = {**chunk(), "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                       "finish_reason": None}]}
    call = {**chunk(), "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        "finish_reason": None}]}
    return [opening, chunk("Hi"), call, chunk(finish_reason="stop"), usage_chunk(), "[DONE]"]


def anthropic_message() -> dict:
    return anthropic_fake.message([anthropic_fake.text_block("Hi"), anthropic_fake.tool_block("f", {"a": 1})],
                                  stop_reason="tool_use")


def anthropic_stream() -> list:
    return anthropic_fake.stream_events("Hi", ("f", ["{\"a\":", " 1}"], "toolu_1"), stop_reason="tool_use")


def gemini_answer() -> dict:
    return gemini_fake.response([gemini_fake.text_part("Hi"), gemini_fake.call_part("f", {"a": 1}, id="c1")],
                                meta=gemini_fake.usage(), candidates=None) | {
        "promptFeedback": {"safetyRatings": []}}


def gemini_stream() -> list:
    return [gemini_fake.response([gemini_fake.text_part("Hi")], finish=None),
            gemini_fake.response([gemini_fake.call_part("f", {"a": 1})], finish="STOP", meta=gemini_fake.usage())]


def response_object(status: str = "completed") -> dict:
    return {"id": "resp_up", "object": "response", "created_at": 1700000000, "status": status, "model": "m",
            "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "Hi", "annotations": []}]},
                       {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f",
                        "arguments": "{}", "status": "completed"}],
            "incomplete_details": None, "error": None,
            "usage": {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 2,
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 5}}


def response_stream() -> list:
    created = {**response_object("in_progress"), "output": [], "usage": None}
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": "",
            "status": "in_progress"}
    return [{"type": "response.created", "sequence_number": 0, "response": created},
            {"type": "response.output_text.delta", "sequence_number": 1, "item_id": "msg_1", "output_index": 0,
             "content_index": 0, "delta": "Hi"},
            {"type": "response.output_item.added", "sequence_number": 2, "output_index": 1, "item": call},
            {"type": "response.completed", "sequence_number": 3, "response": response_object()}]


def embedding_list() -> dict:
    return {"object": "list", "model": "up", "data": [{"object": "embedding", "index": 0, "embedding": [0.6, 0.8]}],
            "usage": {"prompt_tokens": 5, "total_tokens": 5}}


def gemini_embeddings() -> dict:
    return {"embeddings": [{"values": [0.6, 0.8]}], "usageMetadata": {"promptTokenCount": 2}}


# ---------------------------------------------------------------- the substitutions

def member_paths(value, path=()) -> list[tuple]:
    """Every member (object key or array position) under ``value``, as paths from it."""
    found = []
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for name, child in children:
        found.append((*path, name))
        found += member_paths(child, (*path, name))
    return found


def substituted(value, path: tuple, new):
    changed = copy.deepcopy(value)
    holder = changed
    for name in path[:-1]:
        holder = holder[name]
    if new is LEFT_OUT:
        del holder[path[-1]]
    else:
        holder[path[-1]] = new
    return changed


def variants(valid) -> list[tuple[str, object]]:
    """(what changed, the answer) for each member of ``valid`` and each substitute (a stream: a list of
    events, one event changed at a time; its "[DONE]" is kept)."""
    found = []
    for path in member_paths(valid):
        if isinstance(valid, list) and len(path) == 1:
            continue  # a whole event replaced is a different matter (the transports' own tests)
        for new in [*VALUES, LEFT_OUT]:
            label = f"{'.'.join(map(str, path))} = {'(left out)' if new is LEFT_OUT else json.dumps(new)}"
            found.append((label, substituted(valid, path, new)))
    return found


# ---------------------------------------------------------------- the gateway's side

CHAT = ("/v1/chat/completions", {"model": "{model}", "messages": HELLO}, "chat")
CHAT_STREAM = ("/v1/chat/completions", {"model": "{model}", "messages": HELLO, "stream": True,
                                        "stream_options": {"include_usage": True}}, "chat")
MESSAGES = ("/v1/messages", {"model": "{model}", "max_tokens": 50, "messages": HELLO}, "messages")
MESSAGES_STREAM = ("/v1/messages", {"model": "{model}", "max_tokens": 50, "messages": HELLO, "stream": True},
                   "messages")
RESPONSES = ("/v1/responses", {"model": "{model}", "input": "Hello"}, "chat")
RESPONSES_STREAM = ("/v1/responses", {"model": "{model}", "input": "Hello", "stream": True}, "chat")
GEMINI = ("/v1beta/models/{model}:generateContent", {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]},
          "gemini")
GEMINI_STREAM = ("/v1beta/models/{model}:streamGenerateContent?alt=sse",
                 {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]}, "gemini")
EMBEDDINGS = ("/v1/embeddings", {"model": "{model}", "input": "Hello"}, "chat")
GEMINI_BATCH = ("/v1beta/models/{model}:batchEmbedContents",
                {"requests": [{"model": "models/{model}", "content": {"parts": [{"text": "Hello"}]}}]}, "gemini")
GEMINI_EMBED = ("/v1beta/models/{model}:embedContent", {"content": {"parts": [{"text": "Hello"}]}}, "gemini")

# (model, the upstream path it reads, a valid answer, streamed, the inbound requests that reach that reader)
READERS = [
    ("fz-openai", "/chat/completions", tool_completion(), False, [CHAT, MESSAGES, RESPONSES, GEMINI]),
    ("fz-openai", "/chat/completions", chat_stream(), True, [CHAT_STREAM, MESSAGES_STREAM, RESPONSES_STREAM,
                                                             GEMINI_STREAM]),
    ("fz-responses", "/responses", response_object(), False, [RESPONSES]),
    ("fz-responses", "/responses", response_stream(), True, [RESPONSES_STREAM]),
    ("fz-claude", "/messages", anthropic_message(), False, [CHAT, MESSAGES, RESPONSES, GEMINI]),
    ("fz-claude", "/messages", anthropic_stream(), True, [CHAT_STREAM, MESSAGES_STREAM, RESPONSES_STREAM,
                                                          GEMINI_STREAM]),
    ("fz-gemini", "/models/up:generateContent", gemini_answer(), False, [CHAT, MESSAGES, RESPONSES, GEMINI]),
    ("fz-gemini", "/models/up:streamGenerateContent?alt=sse", gemini_stream(), True,
     [CHAT_STREAM, MESSAGES_STREAM, RESPONSES_STREAM, GEMINI_STREAM]),
    ("fz-openai-embed", "/embeddings", embedding_list(), False, [EMBEDDINGS, GEMINI_EMBED]),
    ("fz-gemini-embed", "/models/up:batchEmbedContents", gemini_embeddings(), False, [EMBEDDINGS, GEMINI_BATCH]),
    ("fz-gemini-embed", "/models/up:embedContent", {"embedding": {"values": [0.6, 0.8]}}, False, [GEMINI_EMBED]),
]


def error_shaped(kind: str, status: int, text: str | bytes) -> bool:
    """Whether a refused request's answer is an error in the shape of the inbound API ``kind`` names."""
    return in_error_shape({"messages": ANTHROPIC, "gemini": GOOGLE}.get(kind, OPENAI), status, json.loads(text))


def fault(response, kind: str) -> str | None:
    """What is wrong with the gateway's answer to a malformed upstream answer, or None."""
    if response.status_code >= 500 and response.status_code not in (502, 503, 504):
        return f"status {response.status_code}"
    try:
        text = b"".join(response.streaming_content).decode() if response.streaming else response.content.decode()
    except Exception as broken:  # noqa: BLE001 (what the stream raised is the finding)
        return f"the stream raised {type(broken).__name__}: {broken}"
    if "Traceback" in text:
        return "a trace in the answer"
    if "internal_error" in text:  # an exception the gateway did not expect, told in a stream's error event
        return f"an internal error: {text[-300:]}"
    if response.status_code >= 400 and not error_shaped(kind, response.status_code, text):
        return f"an error not in the API's shape: {text[:200]}"
    return None


@pytest.fixture
def fuzzed_models(seeded, upstream, monkeypatch):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    root = upstream.base_url.removesuffix("/v1")
    openai_side = Provider.objects.create(name="fz-openai", type="openai", base_url=upstream.base_url,
                                          api_key_env=UPSTREAM_KEY_ENV, timeout=5, responses_api=False)
    responses_side = Provider.objects.create(name="fz-responses", type="openai", base_url=upstream.base_url,
                                             api_key_env=UPSTREAM_KEY_ENV, timeout=5, responses_api=True)
    claude = Provider.objects.create(name="fz-claude", type="anthropic", base_url=root,
                                     api_key_env=UPSTREAM_KEY_ENV, timeout=5)
    gemini = Provider.objects.create(name="fz-gemini", type="gemini", base_url=upstream.base_url,
                                     api_key_env=UPSTREAM_KEY_ENV, timeout=5)
    for model, provider in [("fz-openai", openai_side), ("fz-responses", responses_side), ("fz-claude", claude),
                            ("fz-gemini", gemini)]:
        serve(model, [(provider, "up", 1)])
    serve("fz-openai-embed", [(openai_side, "up", 1)], type="embedding")
    serve("fz-gemini-embed", [(gemini, "up", 1)], type="embedding")


def cases(readers: list | None = None, seed: int | None = None, per_member: int | None = None) -> list[tuple]:
    """(model, upstream path, answer, streamed, inbound request, what changed): at every member of every
    valid answer, PER_MEMBER substitutes drawn with the seed, each through the next inbound API of its reader
    (READERS, SEED and PER_MEMBER unless other ones are given)."""
    chosen = []
    draw = random.Random(SEED if seed is None else seed)
    per_member = PER_MEMBER if per_member is None else per_member
    for model, path, valid, streamed, inbound in READERS if readers is None else readers:
        by_member: dict[str, list] = {}
        for label, answer in variants(valid):
            by_member.setdefault(label.split(" = ")[0], []).append((label, answer))
        turn = 0
        for substitutes in by_member.values():
            for label, answer in draw.sample(substitutes, per_member):
                chosen.append((model, path, answer, streamed, inbound[turn % len(inbound)], label))
                turn += 1
    return chosen


def ask(client, secret: str, model: str, request: tuple):
    path, body, kind = request
    body = json.loads(json.dumps(body).replace("{model}", model))
    headers = {"HTTP_X_GOOG_API_KEY": secret} if kind == "gemini" else \
        {"HTTP_X_API_KEY": secret, "HTTP_ANTHROPIC_VERSION": "2023-06-01"} if kind == "messages" else \
        {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    return client.post(path.replace("{model}", model), json.dumps(body), content_type="application/json", **headers)


@pytest.mark.parametrize("reader", range(len(READERS)))
def test_each_valid_answer_is_answered_through_each_inbound_api(client, fuzzed_models, upstream, make_key, reader):
    """The generator's starting points: each valid answer reaches the client as a 200 on every route."""
    _, secret = make_key(tier="free", credits=100, max_credits=100)
    model, path, answer, streamed, inbound = READERS[reader]
    for request in inbound:
        state.reset()
        (upstream.sse if streamed else upstream.json)(path, answer)
        response = ask(client, secret, model, request)
        assert response.status_code == 200, (request[0], response.content)
        assert fault(response, request[2]) is None


def unexpected(records) -> str | None:
    """An exception the gateway logged as not expected (the error handler's 500, a stream's internal error)."""
    for record in records:
        if record.exc_info and record.exc_info[1] is not None:
            return f"it logged {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
    return None


def sweep(client, key: ApiKey, secret: str, upstream, caplog, chosen: list[tuple]) -> list[str]:
    """Each of the ``chosen`` cases (cases()) answered by the upstream and asked for: what was wrong with each
    (a refused request that cost a credit included)."""
    found = []
    for model, path, answer, streamed, request, label in chosen:
        cache.clear()  # no cooldown, no window: each case starts as the first
        state.reset()
        if streamed:
            upstream.sse(path, answer)
        else:
            upstream.json(path, answer)
        caplog.clear()
        before = ApiKey.objects.get(pk=key.pk).credits
        response = ask(client, secret, model, request)
        problem = fault(response, request[2]) or unexpected(caplog.records)
        if not problem and response.status_code >= 400 and ApiKey.objects.get(pk=key.pk).credits != before:
            problem = f"refused with {response.status_code} and charged"
        if problem:
            found.append(f"{model} {request[0]}{' stream' if streamed else ''}: {label}: {problem}")
    return found


@pytest.mark.slow
def test_no_malformed_upstream_answer_is_a_500_or_loses_a_credit(client, fuzzed_models, upstream, make_key, caplog):
    key, secret = make_key(tier="free", credits=1_000_000, max_credits=1_000_000, rpm=1000, rph=10000)
    found = sweep(client, key, secret, upstream, caplog, cases())
    assert found == [], "\n".join(found)
    assert mismatches() == []
    assert not LedgerEntry.objects.filter(status="pending").exists()


# ---------------------------------------------------------------- what the generator found, one test each

@pytest.mark.parametrize("member, value", [("tool_calls", 2**70), ("tool_calls", [5]), ("finish_reason", [5]),
                                           ("finish_reason", {"a": 1})])
@pytest.mark.parametrize("request_", [CHAT, MESSAGES, GEMINI], ids=["chat", "messages", "gemini"])
def test_a_completions_unreadable_tool_calls_or_finish_reason_is_a_malformed_answer(client, fuzzed_models, upstream,
                                                                                   make_key, member, value, request_):
    key, secret = make_key(tier="free", credits=100, max_credits=100)
    answer = chat_completion()
    (answer["choices"][0]["message"] if member == "tool_calls" else answer["choices"][0])[member] = value
    upstream.json("/chat/completions", answer)
    response = ask(client, secret, "fz-openai", request_)
    assert response.status_code == 502, response.content
    assert error_shaped(request_[2], response.status_code, response.content), response.content
    assert ApiKey.objects.get(pk=key.pk).credits == 100


@pytest.mark.parametrize("reason", [[5], {"a": 1}, 5])
def test_an_anthropic_stop_reason_that_is_not_a_string_reads_as_a_stop(client, fuzzed_models, upstream, make_key,
                                                                       reason):
    _, secret = make_key(tier="free", credits=100, max_credits=100)
    upstream.json("/messages", {**anthropic_fake.answer("Hi"), "stop_reason": reason})
    response = ask(client, secret, "fz-claude", CHAT)
    assert response.status_code == 200, response.content
    assert response.json()["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("reason", [[5], {"a": 1}, 5])
def test_a_gemini_finish_reason_that_is_not_a_string_reads_as_a_stop(client, fuzzed_models, upstream, make_key,
                                                                     reason):
    _, secret = make_key(tier="free", credits=100, max_credits=100)
    answer = gemini_fake.answer("Hi")
    answer["candidates"][0]["finishReason"] = reason
    upstream.json("/models/up:generateContent", answer)
    response = ask(client, secret, "fz-gemini", CHAT)
    assert response.status_code == 200, response.content
    assert response.json()["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("index", [[5], {"a": 1}])
def test_an_anthropic_delta_whose_index_is_not_a_number_is_a_malformed_event(client, fuzzed_models, upstream, make_key,
                                                                            index):
    key, secret = make_key(tier="free", credits=100, max_credits=100)
    events = anthropic_stream()
    first_delta = next(event for event in events if event["type"] == "content_block_delta")
    first_delta["index"] = index
    upstream.sse("/messages", events)
    response = ask(client, secret, "fz-claude", MESSAGES_STREAM)
    assert response.status_code == 502, response.content
    assert error_shaped("messages", response.status_code, response.content), response.content
    assert ApiKey.objects.get(pk=key.pk).credits == 100


@pytest.mark.parametrize("output", [-1, 1.5, True])
def test_a_responses_streams_last_output_that_is_not_a_list_reads_as_none(client, fuzzed_models, upstream, make_key,
                                                                          caplog, output):
    _, secret = make_key(tier="free", credits=100, max_credits=100)
    events = response_stream()
    events[-1]["response"]["output"] = output
    upstream.sse("/responses", events)
    response = ask(client, secret, "fz-responses", RESPONSES_STREAM)
    text = b"".join(response.streaming_content).decode()
    assert response.status_code == 200 and "internal_error" not in text
    assert '"output":[]' in text.split("response.completed")[-1].replace(" ", "")
    assert unexpected(caplog.records) is None


@pytest.mark.parametrize("response_", [LEFT_OUT, [], None])
def test_a_responses_streams_last_event_without_its_response_object_is_malformed(client, fuzzed_models, upstream,
                                                                                 make_key, caplog, response_):
    """The last event of a Responses stream carries the response kept and metered: without it the stream is
    malformed, and the client's stream ends with an error event; settled as any stream broken after its output
    began (CONTRACT section 5)."""
    _, secret = make_key(tier="free", credits=100, max_credits=100)
    events = response_stream()
    if response_ is LEFT_OUT:
        del events[-1]["response"]
    else:
        events[-1]["response"] = response_
    upstream.sse("/responses", events)
    response = ask(client, secret, "fz-responses", RESPONSES_STREAM)
    text = b"".join(response.streaming_content).decode()
    assert "internal_error" not in text and "upstream_unavailable" in text
    assert unexpected(caplog.records) is None
    assert not LedgerEntry.objects.filter(status="pending").exists() and mismatches() == []
