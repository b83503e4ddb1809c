"""Malformed answers the first sweep (test_hostile_answers.py) does not reach, generated the same way and held
to the same rules: an Azure deployment's answers (its content-filter members and the stream's opening chunk
without choices included), the answers relayed as they came on the native paths (an anthropic deployment behind
/v1/messages, a gemini one behind Google's API, a Responses upstream behind /v1/responses), their usage members
and the events the metering reads spoiled with every substitute, and the images an upstream answers with."""
import random

import pytest

from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from models_catalog.models import Provider
from models_catalog.provider_types import DEFAULT_AZURE_API_VERSION
from tests.gateway import anthropic_fake, azure_fake, gemini_fake
from tests.gateway.conftest import UPSTREAM_KEY_ENV, UPSTREAM_SECRET, serve
from tests.gateway.test_hostile_answers import (  # noqa: F401 (fuzzed_models: the first sweep's deployments)
    CHAT,
    CHAT_STREAM,
    EMBEDDINGS,
    GEMINI,
    GEMINI_EMBED,
    GEMINI_STREAM,
    MESSAGES,
    MESSAGES_STREAM,
    PER_MEMBER,
    RESPONSES,
    RESPONSES_STREAM,
    SEED,
    ask,
    cases,
    fault,
    fuzzed_models,
    response_object,
    response_stream,
    sweep,
    variants,
)

pytestmark = pytest.mark.django_db

IMAGES = ("/v1/images/generations", {"model": "{model}", "prompt": "a fox", "n": 2}, "chat")


def azure_path(deployment: str, operation: str) -> str:
    return f"/openai/deployments/{deployment}/{operation}?api-version={DEFAULT_AZURE_API_VERSION}"


# ---------------------------------------------------------------- Azure's answers

def azure_stream() -> list:
    """Azure's stream (its opening chunk of prompt filter results and no choices, the role without filter
    results, then chunks with theirs) with a tool call and the usage chunk."""
    events = azure_fake.stream_events("Hi", include_usage=True, cached=2)
    call = azure_fake.chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                             "function": {"name": "f", "arguments": "{}"}}]})
    return [*events[:3], call, *events[3:]]


def azure_images(root: str) -> dict:
    return {"created": 1700000000, "data": [
        {"revised_prompt": "a fox, revised", "content_filter_results": azure_fake.FILTERS,
         "b64_json": "iVBORw0KGgo="},
        {"revised_prompt": "a fox, revised", "content_filter_results": azure_fake.FILTERS,
         "url": f"{root}/files/image.png"}]}


def azure_readers(root: str) -> list[tuple]:
    return [
        ("fz-azure", azure_path("up", "chat/completions"), azure_fake.completion("Hi", cached=3), False,
         [CHAT, MESSAGES, RESPONSES, GEMINI]),
        ("fz-azure", azure_path("up", "chat/completions"), azure_stream(), True,
         [CHAT_STREAM, MESSAGES_STREAM, RESPONSES_STREAM, GEMINI_STREAM]),
        ("fz-azure-embed", azure_path("up", "embeddings"), azure_fake.embeddings(["Hello"], "float"), False,
         [EMBEDDINGS, GEMINI_EMBED]),
        ("fz-azure-image", azure_path("up", "images/generations"), azure_images(root), False, [IMAGES]),
    ]


# ---------------------------------------------------------------- the native paths' answers, usage in full

def anthropic_message() -> dict:
    return anthropic_fake.message([anthropic_fake.text_block("Hi"), anthropic_fake.tool_block("f", {"a": 1})],
                                  stop_reason="tool_use",
                                  counts=anthropic_fake.usage(cache_read=4, cache_creation=2))


def anthropic_stream() -> list:
    return anthropic_fake.stream_events("Hi", ("f", ["{\"a\": 1}"], "toolu_1"), stop_reason="tool_use",
                                        counts=anthropic_fake.usage(cache_read=4, cache_creation=2))


def gemini_answer() -> dict:
    return gemini_fake.response([gemini_fake.text_part("Hi"), gemini_fake.call_part("f", {"a": 1}, id="c1")],
                                meta=gemini_fake.usage(cached=3, thoughts=2, tool_prompt=1))


def gemini_stream() -> list:
    return [gemini_fake.response([gemini_fake.text_part("Hi")], finish=None, meta=gemini_fake.usage(candidates=1)),
            gemini_fake.response([gemini_fake.call_part("f", {"a": 1})], finish="STOP",
                                 meta=gemini_fake.usage(cached=3, thoughts=2))]


def counted_response() -> dict:
    answer = response_object()
    answer["usage"] = {"input_tokens": 7, "input_tokens_details": {"cached_tokens": 3}, "output_tokens": 4,
                       "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 11}
    return answer


def counted_response_stream() -> list:
    events = response_stream()
    events[-1]["response"] = counted_response()
    done = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}",
            "status": "completed"}
    return [*events[:-1], {"type": "response.function_call_arguments.delta", "sequence_number": 3, "item_id": "fc_1",
                           "output_index": 1, "delta": "{}"},
            {"type": "response.output_item.done", "sequence_number": 4, "output_index": 1, "item": done},
            {**events[-1], "sequence_number": 5}]


# Each through its native path alone: the answer relayed as it came, with only its model replaced.
NATIVE = [
    ("fz-claude", "/messages", anthropic_message(), False, [MESSAGES]),
    ("fz-claude", "/messages", anthropic_stream(), True, [MESSAGES_STREAM]),
    ("fz-gemini", "/models/up:generateContent", gemini_answer(), False, [GEMINI]),
    ("fz-gemini", "/models/up:streamGenerateContent?alt=sse", gemini_stream(), True, [GEMINI_STREAM]),
    ("fz-responses", "/responses", counted_response(), False, [RESPONSES]),
    ("fz-responses", "/responses", counted_response_stream(), True, [RESPONSES_STREAM]),
]


def native_cases() -> list[tuple]:
    """As cases(), each through its one route, with every substitute at the members the metering reads (a usage
    member, an event's or a block's type) and PER_MEMBER drawn elsewhere."""
    chosen = []
    draw = random.Random(SEED)
    for model, path, valid, streamed, [request] in NATIVE:
        by_member: dict[str, list] = {}
        for label, answer in variants(valid):
            by_member.setdefault(label.split(" = ")[0], []).append((label, answer))
        for member, substitutes in by_member.items():
            metered = "usage" in member.lower() or member.split(".")[-1] == "type"
            for label, answer in substitutes if metered else draw.sample(substitutes, PER_MEMBER):
                chosen.append((model, path, answer, streamed, request, label))
    return chosen


def event_cases(readers: list[tuple]) -> list[tuple]:
    """The streams' events themselves spoiled (the sweeps above change members within them): each event left
    out, sent twice (a usage or a last event counted again), or replaced by JSON that is no object, each
    through the next inbound API of its reader."""
    chosen = []
    for model, path, valid, streamed, inbound in readers:
        if not streamed:
            continue
        turn = 0
        for at in range(len(valid)):
            for label, events in [("left out", valid[:at] + valid[at + 1:]),
                                  ("sent twice", valid[:at + 1] + valid[at:]),
                                  *((f"= {new}", [*valid[:at], new, *valid[at + 1:]]) for new in ("{}", "null", "5"))]:
                chosen.append((model, path, events, True, inbound[turn % len(inbound)], f"event {at} {label}"))
                turn += 1
    return chosen


# ---------------------------------------------------------------- the gateway's side

@pytest.fixture
def azure_models(fuzzed_models, upstream, monkeypatch):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    root = upstream.base_url.removesuffix("/v1")
    upstream.serve_file("/files/image.png", azure_fake.PNG_1X1, "image/png")
    provider = Provider.objects.create(name="fz-azure", type="azure", base_url=root, api_key_env=UPSTREAM_KEY_ENV,
                                       timeout=5, responses_api=False)  # /v1/responses through its chat reader
    serve("fz-azure", [(provider, "up", 1)])
    serve("fz-azure-embed", [(provider, "up", 1)], type="embedding")
    serve("fz-azure-image", [(provider, "up", 1)], type="image")
    return root


@pytest.mark.parametrize("reader", range(len(NATIVE) + 4))
def test_each_valid_answer_is_answered_through_each_inbound_api(client, azure_models, upstream, make_key, reader):
    """The generator's starting points: each valid answer reaches the client as a 200 on every route."""
    _, secret = make_key(tier="free", credits=100, max_credits=100)
    model, path, answer, streamed, inbound = [*NATIVE, *azure_readers(azure_models)][reader]
    for request in inbound:
        (upstream.sse if streamed else upstream.json)(path, answer)
        response = ask(client, secret, model, request)
        assert response.status_code == 200, (request[0], response.content)
        assert fault(response, request[2]) is None


@pytest.mark.slow
def test_no_malformed_azure_native_or_image_answer_is_a_500_or_loses_a_credit(client, azure_models, upstream,
                                                                              make_key, caplog):
    key, secret = make_key(tier="free", credits=1_000_000, max_credits=1_000_000, rpm=1000, rph=10000)
    readers = azure_readers(azure_models)
    found = sweep(client, key, secret, upstream, caplog,
                  [*cases(readers), *native_cases(), *event_cases([*readers, *NATIVE])])
    assert found == [], "\n".join(found)
    assert mismatches() == []
    assert not LedgerEntry.objects.filter(status="pending").exists()


# ---------------------------------------------------------------- found beside the sweep, one test each

def images_answer(root: str, count: int) -> dict:
    return {"created": 1700000000, "data": [{"revised_prompt": f"fox {at}", "url": f"{root}/files/image.png"}
                                            for at in range(count)]}


def test_images_past_the_n_asked_for_are_neither_fetched_nor_handed_out(client, azure_models, upstream, make_key):
    """An upstream that answers with more images than the client asked for: the first n are the answer, the
    rest are not fetched, stored or given away for the price of n."""
    key, secret = make_key(tier="free", credits=100, max_credits=100)
    upstream.json(azure_path("up", "images/generations"), images_answer(azure_models, 5))
    response = ask(client, secret, "fz-azure-image", IMAGES)
    assert response.status_code == 200, response.content
    assert [item["revised_prompt"] for item in response.json()["data"]] == ["fox 0", "fox 1"]
    assert len([call for call in upstream.calls if call.method == "GET"]) == 2
    assert ApiKey.objects.get(pk=key.pk).credits == 98 and mismatches() == []


def test_images_the_upstream_did_not_deliver_are_not_charged(client, azure_models, upstream, make_key):
    """Fewer images than asked for: the client pays the model's cost for each image it got, and the rest of
    the hold goes back (a short answer may cost it images, never credits)."""
    key, secret = make_key(tier="free", credits=100, max_credits=100)
    upstream.json(azure_path("up", "images/generations"), images_answer(azure_models, 1))
    response = ask(client, secret, "fz-azure-image", (IMAGES[0], {**IMAGES[1], "n": 3}, "chat"))
    assert response.status_code == 200, response.content
    assert len(response.json()["data"]) == 1 and response.json()["remaining_credits"] == 99
    assert response.headers["X-Credits-Charged"] == "1"
    assert ApiKey.objects.get(pk=key.pk).credits == 99 and mismatches() == []
    assert not LedgerEntry.objects.filter(status="pending").exists()
