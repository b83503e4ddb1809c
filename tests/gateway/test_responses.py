"""OpenAI's Responses API (CONTRACT section 9) through the openai SDK, unchanged, against a served gateway:
local-chat (a translated deployment), the stored responses, and the refusals."""
import json
from pathlib import Path

import openai
import pytest
import requests
from django.contrib.admin.utils import quote as admin_quote
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pydantic import BaseModel

from gateway.models import StoredResponse
from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from models_catalog.models import UsageEvent
from tests.gateway.conftest import assert_error, post
from tests.gateway.test_chat import _statements

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
def sdk(live_server, seeded, local_key):
    key, secret = local_key
    with openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=secret, max_retries=0, timeout=30) as client:
        yield client, key, secret


def auth(secret: str) -> dict:
    return {"Authorization": f"Bearer {secret}"}


def credits_of(key) -> int:
    return ApiKey.objects.get(pk=key.pk).credits


def test_a_plain_response_is_answered_charged_and_stored_before_it_leaves(sdk):
    client, key, _ = sdk
    response = client.responses.create(model="local-chat", input="Hello from the Responses API",
                                        metadata={"ticket": "42"})
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status == "completed" and response.model == "local-chat"
    assert "local-chat" in response.output_text and response.metadata == {"ticket": "42"}
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens > 0
    assert response.store is True and response.tools == [] and response.tool_choice == "auto"
    stored = StoredResponse.objects.get(pk=response.id)
    assert stored.key_id == key.pk and stored.response["output"][0]["content"][0]["text"] == response.output_text
    assert stored.input_items[0]["content"][0]["text"] == "Hello from the Responses API"
    charge = LedgerEntry.objects.get(kind="charge")
    assert (charge.status, charge.operation) == ("completed", "responses")
    usage = UsageEvent.objects.get()
    assert (usage.operation, usage.success, usage.input_tokens) == ("responses", True, response.usage.input_tokens)
    assert credits_of(key) == 99
    assert mismatches() == []


def test_the_raw_answer_carries_credits_limits_and_what_local_chat_left_out(sdk):
    client, _, _ = sdk
    raw = client.responses.with_raw_response.create(
        model="local-chat", input="Hi", reasoning={"effort": "low", "summary": "auto"}, prompt_cache_key="k",
        tools=[{"type": "web_search"}, WEATHER], extra_body={"client_metadata": {"x": "1"}})
    assert raw.headers["x-remaining-credits"] == "99"
    assert raw.headers["x-ratelimit-limit-requests"]
    ignored = raw.headers["x-gateway-ignored"].split(", ")
    assert set(ignored) == {"reasoning.summary", "prompt_cache_key", "tools:web_search", "client_metadata",
                            "reasoning.effort"}
    assert raw.parse().status == "completed"


def test_a_streamed_response_sends_every_event_in_sequence_and_completes_with_its_output(sdk):
    client, key, _ = sdk
    events = list(client.responses.create(model="local-chat", input="Stream me a reply", stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert "response.output_text.delta" in kinds
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    final = events[-1].response
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert final.output_text == text and "local-chat" in text and final.usage.output_tokens > 0
    assert StoredResponse.objects.get(pk=final.id).response["output"][0]["content"][0]["text"] == text
    assert credits_of(key) == 99 and mismatches() == []


def test_the_sdk_stream_helper_rebuilds_the_final_response(sdk):
    client, _, _ = sdk
    with client.responses.stream(model="local-chat", input="Hello helper") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.status == "completed" and "local-chat" in final.output_text


class City(BaseModel):
    name: str
    population: int


def test_parse_with_a_pydantic_schema_answers_a_document_the_schema_accepts(sdk):
    client, _, _ = sdk
    parsed = client.responses.parse(model="local-chat", input="A city, please", text_format=City)
    assert isinstance(parsed.output_parsed, City)


def test_a_function_tool_round_trip_over_previous_response_id(sdk):
    client, key, _ = sdk
    first = client.responses.create(model="local-chat", input="use get_weather: Paris", tools=[WEATHER])
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Paris"}
    second = client.responses.create(model="local-chat", previous_response_id=first.id, tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 degrees"}])
    assert "Sunny, 21 degrees" in second.output_text and second.previous_response_id == first.id
    items = client.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in items.data] == ["message", "function_call", "function_call_output"]
    assert credits_of(key) == 98 and mismatches() == []


def test_a_custom_tool_is_called_with_its_input_and_comes_back_as_a_custom_tool_call(sdk):
    client, _, _ = sdk
    tool = {"type": "custom", "name": "apply_patch", "description": "Apply a patch.",
            "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}
    response = client.responses.create(model="local-chat", input="use apply_patch: add a line", tools=[tool])
    call = response.output[-1]
    assert (call.type, call.name, call.input) == ("custom_tool_call", "apply_patch", "add a line")
    streamed = list(client.responses.create(model="local-chat", input="use apply_patch: add a line", tools=[tool],
                                            stream=True))
    kinds = [event.type for event in streamed]
    assert "response.custom_tool_call_input.done" in kinds
    assert streamed[-1].response.output[-1].input == "add a line"
    answered = client.responses.create(model="local-chat", previous_response_id=response.id, tools=[tool], input=[
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done."}])
    assert "Done." in answered.output_text


def test_a_stored_response_can_be_read_listed_and_deleted_by_its_key_only(sdk, make_key, live_server):
    client, _, secret = sdk
    made = client.responses.create(model="local-chat", input=[
        {"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hello"}])
    assert client.responses.retrieve(made.id).output_text == made.output_text
    assert client.responses.retrieve(made.id, stream=False).output_text == made.output_text
    # A replay of its events is the one form of reading it the gateway cannot give: a 400 the SDK raises,
    # not a JSON object it would read as an event stream.
    with pytest.raises(openai.BadRequestError, match="stream"):
        list(client.responses.retrieve(made.id, stream=True))
    items = client.responses.input_items.list(made.id)
    assert [item.role for item in items.data] == ["user", "developer"]  # newest first, as OpenAI lists them
    page = client.responses.input_items.list(made.id, limit=1, order="asc")
    assert page.has_more is True and page.first_id == page.last_id == page.data[0].id
    after = requests.get(f"{live_server.url}/v1/responses/{made.id}/input_items?order=asc&after={page.last_id}",
                         headers=auth(secret), timeout=10).json()
    assert [item["role"] for item in after["data"]] == ["user"] and after["has_more"] is False
    _, other = make_key(tier="augmented", credits=10)
    for method in ("get", "delete"):
        answer = requests.request(method, f"{live_server.url}/v1/responses/{made.id}", headers=auth(other), timeout=10)
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "response_not_found"
    deleted = client.responses.delete(made.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    raw = requests.delete(f"{live_server.url}/v1/responses/{made.id}", headers=auth(secret), timeout=10)
    assert raw.status_code == 404
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)


def test_an_answer_holding_a_nul_is_stored_and_charged_once(sdk):
    """local-chat quotes its input: a NUL in it reaches the answer, which PostgreSQL's jsonb cannot hold as it
    is. The client has the answer as it came, the stored copy the character replaced, the key one charge."""
    client, key, _ = sdk
    response = client.responses.create(model="local-chat", input="before\x00after")
    assert "before\x00after" in response.output_text
    stored = StoredResponse.objects.get(pk=response.id)
    assert "before\ufffdafter" in stored.response["output"][0]["content"][0]["text"]
    assert stored.input_items[0]["content"][0]["text"] == "before\ufffdafter"
    assert client.responses.retrieve(response.id).output_text == stored.response["output"][0]["content"][0]["text"]
    assert LedgerEntry.objects.get(kind="charge").status == "completed" and credits_of(key) == 99
    assert mismatches() == []


def test_delete_answers_the_deleted_object(client, seeded, local_key):
    _, secret = local_key
    made = post(client, "/v1/responses", {"model": "local-chat", "input": "Hi"}, secret).json()
    answer = client.delete(f"/v1/responses/{made['id']}", **{"HTTP_AUTHORIZATION": f"Bearer {secret}"})
    assert answer.json() == {"id": made["id"], "object": "response.deleted", "deleted": True}
    assert not StoredResponse.objects.exists()


def test_a_response_id_with_a_nul_is_no_stored_response_anywhere(client, seeded, local_key):
    # PostgreSQL's text cannot hold a NUL, so no stored id has one: asked for, it was a database error (a 500).
    key, secret = local_key
    auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    for method, path in (("get", "/v1/responses/resp_a%00b"), ("get", "/v1/responses/resp_a%00b/input_items"),
                         ("delete", "/v1/responses/resp_a%00b")):
        answer = getattr(client, method)(path, **auth)
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "response_not_found", answer.content
    follow_up = post(client, "/v1/responses", {"model": "local-chat", "input": "Hi",
                                               "previous_response_id": "resp_a\x00b"}, secret)
    assert follow_up.status_code == 404, follow_up.content
    assert follow_up.json()["error"]["param"] == "previous_response_id"
    assert credits_of(key) == 100 and mismatches() == []


def test_store_false_keeps_nothing_and_a_follow_up_on_it_is_a_free_404(sdk):
    client, key, _ = sdk
    made = client.responses.create(model="local-chat", input="Hi", store=False)
    assert made.store is False and not StoredResponse.objects.exists()
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="local-chat", input="Again", previous_response_id=made.id)
    assert missing.value.body["code"] == "response_not_found"
    assert missing.value.body["param"] == "previous_response_id"
    assert credits_of(key) == 99 and LedgerEntry.objects.filter(kind="charge").count() == 1


def test_another_keys_response_cannot_be_continued(sdk, make_key, live_server):
    client, _, _ = sdk
    made = client.responses.create(model="local-chat", input="Hi")
    other_key, other = make_key(tier="augmented", credits=10)
    answer = requests.post(f"{live_server.url}/v1/responses", headers=auth(other), timeout=10,
                           json={"model": "local-chat", "input": "Hi", "previous_response_id": made.id})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "response_not_found"
    assert credits_of(other_key) == 10


def test_refusals_have_the_contracts_statuses_and_cost_nothing(client, seeded, local_key, broke_key, free_key):
    _, secret = local_key
    assert_error(post(client, "/v1/responses", {"model": "nope", "input": "Hi"}, secret), 404, "model_not_found",
                 param="model")
    assert_error(post(client, "/v1/responses", {"model": "local-embedding", "input": "Hi"}, secret), 400,
                 "model_type_mismatch", param="model")
    assert_error(post(client, "/v1/responses", {"model": "local-chat", "input": 7}, secret), 400, "invalid_value",
                 param="input")
    assert_error(post(client, "/v1/responses", {"model": "local-chat", "input": "Hi", "background": True}, secret),
                 400, "unsupported_parameter", param="background")
    assert_error(post(client, "/v1/responses", {"model": "local-chat", "input": "Hi", "conversation": "c"}, secret),
                 400, "unsupported_parameter", param="conversation")
    assert_error(post(client, "/v1/responses", {"model": "local-chat", "input": "Hi", "temperature": 3}, secret),
                 400, "invalid_value", param="temperature")
    assert_error(post(client, "/v1/responses", b"{not json", secret), 400, "invalid_json")
    _, broke = broke_key
    assert_error(post(client, "/v1/responses", {"model": "local-chat", "input": "Hi"}, broke), 402,
                 "insufficient_credits", type_="insufficient_credits_error")
    _, free = free_key  # gpt-5 is for the paid tiers in the shipped catalog
    assert_error(post(client, "/v1/responses", {"model": "gpt-5", "input": "Hi"}, free), 403,
                 "model_not_allowed", type_="permission_error", param="model")
    assert not LedgerEntry.objects.filter(kind="charge").exists() and mismatches() == []


def test_the_rpm_limit_holds_for_responses(client, seeded, make_key):
    _, secret = make_key(tier="augmented", credits=100, rpm=1)
    assert post(client, "/v1/responses", {"model": "local-chat", "input": "Hi"}, secret).status_code == 200
    refused = post(client, "/v1/responses", {"model": "local-chat", "input": "Hi"}, secret)
    assert_error(refused, 429, "rate_limit_exceeded", type_="rate_limit_error", param="rpm")
    assert refused["Retry-After"]


def test_a_websocket_upgrade_is_answered_426_and_a_plain_get_405(client, seeded, local_key):
    _, secret = local_key
    upgrade = client.get("/v1/responses", HTTP_UPGRADE="websocket", HTTP_CONNECTION="Upgrade",
                         HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert_error(upgrade, 426, "websocket_not_supported")
    assert_error(client.get("/v1/responses", HTTP_UPGRADE="websocket"), 426, "websocket_not_supported")
    assert_error(client.get("/v1/responses", HTTP_AUTHORIZATION=f"Bearer {secret}"), 405, "method_not_allowed")


def test_input_tokens_are_counted_free_of_charge(client, seeded, local_key):
    key, secret = local_key
    answer = post(client, "/v1/responses/input_tokens", {"model": "local-chat", "input": "Count these words"}, secret)
    assert answer.status_code == 200
    body = answer.json()
    assert body["object"] == "response.input_tokens" and body["input_tokens"] > 0
    assert credits_of(key) == 100 and not LedgerEntry.objects.filter(kind="charge").exists()


def test_a_response_request_costs_what_a_chat_request_costs_in_queries_and_a_follow_up_one_read_more(
        client, seeded, local_key):
    _, secret = local_key
    chat = {"model": "local-chat", "messages": [{"role": "user", "content": "Hi"}]}
    assert post(client, "/v1/chat/completions", chat, secret).status_code == 200  # the key is cached from here on
    with CaptureQueriesContext(connection) as chat_queries:
        assert post(client, "/v1/chat/completions", chat, secret).status_code == 200
    with CaptureQueriesContext(connection) as unstored:
        assert post(client, "/v1/responses", {"model": "local-chat", "input": "Hi", "store": False},
                    secret).status_code == 200
    assert len(unstored) == len(chat_queries)
    with CaptureQueriesContext(connection) as first:
        made = post(client, "/v1/responses", {"model": "local-chat", "input": "Hi"}, secret).json()
    with CaptureQueriesContext(connection) as follow_up:
        assert post(client, "/v1/responses", {"model": "local-chat", "input": "More",
                                              "previous_response_id": made["id"]}, secret).status_code == 200
    assert len(follow_up) == len(first) + 1
    if connection.vendor == "postgresql":  # the charge, then the settlement that also writes the stored response
        assert _statements(first.captured_queries) == ["WITH keys_apikey", "WITH keys_ledgerentry"]
        assert _statements(follow_up.captured_queries) == [
            "SELECT gateway_storedresponse", "WITH keys_apikey", "WITH keys_ledgerentry"]
    else:
        assert _statements(follow_up.captured_queries)[0] == "SELECT gateway_storedresponse"
        assert _statements(follow_up.captured_queries)[-1] == "INSERT gateway_storedresponse"


def test_an_idempotent_retry_is_answered_with_the_first_response(client, seeded, local_key):
    key, secret = local_key
    body = {"model": "local-chat", "input": "Once only"}
    first = post(client, "/v1/responses", body, secret, HTTP_IDEMPOTENCY_KEY="abc-1")
    again = post(client, "/v1/responses", body, secret, HTTP_IDEMPOTENCY_KEY="abc-1")
    assert first.json()["id"] == again.json()["id"] and credits_of(key) == 99
    assert StoredResponse.objects.count() == 1


def test_purge_responses_deletes_what_is_older_than_the_retention(client, seeded, local_key, clock, settings):
    _, secret = local_key
    settings.RESPONSES_RETENTION_DAYS = 2
    old = post(client, "/v1/responses", {"model": "local-chat", "input": "Old"}, secret).json()
    clock.advance(3 * 86400)
    new = post(client, "/v1/responses", {"model": "local-chat", "input": "New"}, secret).json()
    call_command("purge_responses", "--dry-run")
    assert StoredResponse.objects.count() == 2
    call_command("purge_responses")
    assert list(StoredResponse.objects.values_list("id", flat=True)) == [new["id"]]
    assert old["id"] != new["id"]


def test_staff_find_a_stored_response_by_the_request_id_on_the_keys_ledger(client, seeded, local_key,
                                                                           django_user_model):
    key, secret = local_key
    made = post(client, "/v1/responses", {"model": "local-chat", "input": "Find me"}, secret).json()
    request_id = LedgerEntry.objects.get(kind="charge").request_id
    assert request_id and StoredResponse.objects.get(pk=made["id"]).request_id == request_id
    client.force_login(django_user_model.objects.create_superuser("alice", "alice@example.com", "correct horse"))
    listing = client.get("/admin/gateway/storedresponse/", {"q": request_id, "key": key.pk})
    assert listing.status_code == 200 and made["id"] in listing.content.decode()
    # As the admin's own links do: "resp_22…" would otherwise read as an escaped quotation mark.
    page = client.get(f"/admin/gateway/storedresponse/{admin_quote(made['id'])}/change/")
    assert page.status_code == 200 and "Find me" in page.content.decode()


CODEX = Path(__file__).resolve().parents[1] / "clients" / "recorded" / "codex-0.171.0.json"


def _sse_events(content: bytes) -> list[dict]:
    return [json.loads(block.split("data: ", 1)[1]) for block in content.decode().split("\n\n") if "data: " in block]


@pytest.mark.skipif(not CODEX.exists(), reason="Codex's recorded requests are not in this tree")
def test_codexs_recorded_turns_run_a_tool_round_trip_on_local_chat(client, seeded, local_key):
    _, secret = local_key
    calls, answer = json.loads(CODEX.read_text())["tool_round_trip"]
    first = post(client, "/v1/responses", calls["body"], secret)
    assert first.status_code == 200 and first["Content-Type"].startswith("text/event-stream")
    ignored = set(first["X-Gateway-Ignored"].split(", "))
    assert {"tools:namespace", "tools:web_search", "prompt_cache_key", "client_metadata"} <= ignored
    events = _sse_events(b"".join(first.streaming_content))
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    call = events[-1]["response"]["output"][-1]
    assert (events[-1]["type"], call["type"], call["name"]) == ("response.completed", "function_call", "exec_command")
    assert json.loads(call["arguments"])["cmd"] == "echo clients-ok-42"
    second = post(client, "/v1/responses", answer["body"], secret)
    final = _sse_events(b"".join(second.streaming_content))[-1]["response"]
    assert final["status"] == "completed" and "clients-ok-42" in final["output"][-1]["content"][0]["text"]
    assert not StoredResponse.objects.exists()  # Codex sends store: false
    assert mismatches() == []


def test_a_token_priced_model_shows_its_cost_in_the_responses_usage_plain_and_streamed(client, seeded, local_key):
    from decimal import Decimal

    from models_catalog import catalog
    from models_catalog.models import AiModel

    AiModel.objects.filter(model_id="local-chat").update(pricing_input=Decimal("1000"), pricing_output=Decimal("1000"),
                                                         max_output_tokens=100)
    catalog.invalidate()
    key, secret = local_key
    plain = post(client, "/v1/responses", {"model": "local-chat", "input": "Price me"}, secret)
    usage = plain.json()["usage"]
    assert usage["cost"] == int(plain["X-Credits-Charged"]) >= 1
    streamed = post(client, "/v1/responses", {"model": "local-chat", "input": "Price me", "stream": True}, secret)
    final = _sse_events(b"".join(streamed.streaming_content))[-1]["response"]
    assert final["usage"]["cost"] >= 1
    assert credits_of(key) == 100 - usage["cost"] - final["usage"]["cost"]
    assert mismatches() == []


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/input_tokens"])
@pytest.mark.parametrize("given", [[], [{"type": "item_reference", "id": "msg_1"}], [{"type": "reasoning", "summary": []}]])
def test_an_input_without_an_item_a_model_reads_is_refused_naming_input(client, seeded, local_key, path, given):
    _, secret = local_key
    error = assert_error(post(client, path, {"model": "local-chat", "input": given}, secret), 400, "invalid_value",
                         param="input")
    assert error["message"].startswith("input: must hold at least one item")


@pytest.mark.parametrize("method", ["post", "get"])
def test_the_compact_endpoint_is_a_404_that_says_how_to_go_on_not_a_stored_response(client, db, method):
    """Codex with its built-in OpenAI provider pointed at the gateway compacts through /v1/responses/compact:
    a clear 404 in the contract's shape, not a 405 to a POST on a stored response named "compact"."""
    answer = client.post("/v1/responses/compact", json.dumps({"model": "local-chat", "input": []}),
                         content_type="application/json") if method == "post" else client.get("/v1/responses/compact")
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["code"] == "compact_not_supported" and error["type"] == "invalid_request_error"
    assert "model provider of its own" in error["message"]
