"""POST /v1/chat/completions without streaming: validation, forwarding, metering."""
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gateway import metering_sql
from keys.models import ApiKey, LedgerEntry
from models_catalog import catalog
from models_catalog.models import UsageEvent
from tests.gateway.conftest import LOCAL_BODIES, UPSTREAM_SECRET, assert_error, chat_completion, post

pytestmark = pytest.mark.django_db
PATH = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Hello"}]


def test_the_local_model_answers_with_a_completion_and_is_charged(client, seeded, free_key):
    key, secret = free_key
    response = post(client, PATH, {"model": "local-chat", "messages": [{"role": "user", "content": "Tell me a joke"}]},
                    secret)
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "local-chat"
    assert "Tell me a joke" in body["choices"][0]["message"]["content"]
    assert body["choices"][0]["finish_reason"] == "stop"
    assert response["X-Remaining-Credits"] == "99"
    assert response["X-RateLimit-Limit-Requests"] == "60"
    assert response["X-RateLimit-Remaining-Requests"] == "59"
    assert response["X-RateLimit-Reset-Requests"].endswith("s")
    assert ApiKey.objects.get(pk=key.pk).credits == 99
    event = UsageEvent.objects.get()
    assert (event.operation, event.status, event.success, event.credits_charged, event.provider) == (
        "chat", 200, True, 1, "local")
    assert event.input_tokens == body["usage"]["prompt_tokens"] > 0
    assert event.output_tokens == body["usage"]["completion_tokens"] > 0


def test_the_upstream_gets_its_model_name_its_secret_and_only_the_clients_parameters(client, fake_models, upstream,
                                                                                  free_key):
    _, secret = free_key
    upstream.json("/chat/completions", chat_completion("Forwarded!"))
    body = {"model": "fake-chat", "messages": HELLO, "temperature": 0.2, "max_tokens": 50, "stop": ["\n"],
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
            "tool_choice": "auto", "seed": 7, "user": "end-user-1", "logit_bias": {"50256": -100}}
    response = post(client, PATH, body, secret)
    assert response.status_code == 200, response.content
    assert response.json()["choices"][0]["message"]["content"] == "Forwarded!"
    # The client sees the public id, not the upstream's name for it.
    assert response.json()["model"] == "fake-chat"
    call = upstream.posts()[0]
    assert call.path == "/v1/chat/completions"
    assert call.headers["Authorization"] == f"Bearer {UPSTREAM_SECRET}"
    assert secret not in str(call.headers) and secret not in str(call.body)
    assert call.body == {**body, "model": "up-chat", "stream": False}


def test_usage_tokens_come_from_the_upstream_report(client, fake_models, upstream, free_key):
    _, secret = free_key
    upstream.json("/chat/completions", chat_completion(prompt_tokens=123, completion_tokens=45))
    assert post(client, PATH, {"model": "fake-chat", "messages": HELLO}, secret).status_code == 200
    event = UsageEvent.objects.get()
    assert (event.input_tokens, event.output_tokens, event.provider) == (123, 45, "fake")


def test_usage_records_the_cached_part_of_the_prompt(client, fake_models, upstream, free_key):
    _, secret = free_key
    answer = chat_completion(prompt_tokens=1200, completion_tokens=5)
    answer["usage"]["prompt_tokens_details"] = {"cached_tokens": 1024}
    upstream.json("/chat/completions", answer)
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO}, secret)
    assert response.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 1024}
    event = UsageEvent.objects.get()
    assert (event.input_tokens, event.cached_tokens, event.output_tokens) == (1200, 1024, 5)


def test_a_cached_count_above_the_prompt_is_not_believed_past_it(client, fake_models, upstream, free_key):
    _, secret = free_key
    answer = chat_completion(prompt_tokens=10, completion_tokens=5)
    answer["usage"]["prompt_tokens_details"] = {"cached_tokens": 10**12}
    upstream.json("/chat/completions", answer)
    assert post(client, PATH, {"model": "fake-chat", "messages": HELLO}, secret).status_code == 200
    assert UsageEvent.objects.get().cached_tokens == 10


@pytest.mark.parametrize("messages, param, code", [
    ([], "messages", "invalid_value"),
    ("Hello", "messages", "invalid_value"),
    ([{"content": "Hi"}], "messages.0.role", "missing_field"),
    ([{"role": "user", "content": "Hi"}, {"role": "robot", "content": "Hi"}], "messages.1.role", "invalid_value"),
    ([{"role": "user"}], "messages.0.content", "missing_field"),
    ([{"role": "user", "content": None}], "messages.0.content", "missing_field"),
    ([{"role": "user", "content": 12}], "messages.0.content", "invalid_value"),
    ([{"role": "user", "content": [{"text": "no type"}]}], "messages.0.content.0.type", "invalid_value"),
    ([{"role": "user", "content": [{"type": "text", "text": 5}]}], "messages.0.content.0.text", "invalid_value"),
    ([{"role": "tool", "content": "42"}], "messages.0.tool_call_id", "missing_field"),
    ([{"role": "user", "content": "Hi", "name": 3}], "messages.0.name", "invalid_value"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]}],
     "messages.0.tool_calls.0.function", "missing_field"),
    (["just a string"], "messages.0", "invalid_value"),
])
def test_bad_messages_are_named_by_dotted_path(client, seeded, free_key, messages, param, code):
    key, secret = free_key
    assert_error(post(client, PATH, {"model": "local-chat", "messages": messages}, secret), 400, code, param=param)
    assert ApiKey.objects.get(pk=key.pk).credits == 100


@pytest.mark.parametrize("messages, message", [
    ([], "messages: Must not be empty."),
    ("Hello", "messages: Must be an array."),
])
def test_a_bad_list_of_messages_is_refused_in_plain_words(client, seeded, free_key, messages, message):
    key, secret = free_key
    response = post(client, PATH, {"model": "local-chat", "messages": messages}, secret)
    assert_error(response, 400, "invalid_value", param="messages")
    assert response.json()["error"]["message"] == message
    assert ApiKey.objects.get(pk=key.pk).credits == 100


@pytest.mark.parametrize("member, value, param", [
    ("stream", "yes", "stream"),
    ("temperature", 3, "temperature"),
    ("temperature", "0.5", "temperature"),
    ("top_p", True, "top_p"),
    ("max_tokens", 0, "max_tokens"),
    ("max_tokens", 1.5, "max_tokens"),
    ("stop", ["a", "b", "c", "d", "e"], "stop"),
    ("tool_choice", "sometimes", "tool_choice"),
    ("n", 0, "n"),
    ("presence_penalty", -3, "presence_penalty"),
    ("logit_bias", {"50256": 500}, "logit_bias.50256"),
    ("logprobs", 1, "logprobs"),
    ("top_logprobs", 21, "top_logprobs"),
    ("parallel_tool_calls", "true", "parallel_tool_calls"),
    ("stream_options", {"include_usage": True}, "stream_options"),
    ("user", ["not", "a", "string"], "user"),
])
def test_forwarded_parameters_are_type_checked(client, seeded, free_key, member, value, param):
    _, secret = free_key
    response = post(client, PATH, {"model": "local-chat", "messages": HELLO, member: value}, secret)
    assert_error(response, 400, "invalid_value", param=param)
    assert not UsageEvent.objects.exists()


@pytest.mark.parametrize("member, value, param", [
    ("tools", [{"type": "function", "function": {"description": "no name"}}], "tools.0.function.name"),
    ("tools", [{"function": {"name": "f"}}], "tools.0.type"),
    ("response_format", {"schema": {}}, "response_format.type"),
])
def test_missing_members_inside_parameters_are_missing_field(client, seeded, free_key, member, value, param):
    _, secret = free_key
    response = post(client, PATH, {"model": "local-chat", "messages": HELLO, member: value}, secret)
    assert_error(response, 400, "missing_field", param=param)


def test_null_optional_parameters_count_as_absent(client, seeded, free_key):
    _, secret = free_key
    body = {"model": "local-chat", "messages": HELLO, "temperature": None, "tools": None, "stream": None}
    assert post(client, PATH, body, secret).status_code == 200


def test_an_assistant_message_with_tool_calls_may_have_null_content(client, fake_models, upstream, free_key):
    _, secret = free_key
    upstream.json("/chat/completions", chat_completion())
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "refusal": None,
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "Sunny"}]},
    ]
    assert post(client, PATH, {"model": "fake-chat", "messages": messages}, secret).status_code == 200
    forwarded = upstream.posts()[0].body["messages"]
    assert forwarded[1]["tool_calls"][0]["function"] == {"name": "weather", "arguments": "{}"}
    # Members a message dump carries but the gateway does not know are not forwarded.
    assert "refusal" not in forwarded[1]


TABLE = re.compile(r"\b(?:UPDATE|INTO|FROM)\s+(\w+)")


def _statements(captured) -> list[str]:
    """Each statement a request sent as "VERB first_table", without the savepoints of the test's
    own transaction."""
    named = []
    for query in captured:
        sql = query["sql"].replace('"', "")
        verb = sql.split()[0]
        if verb not in ("SAVEPOINT", "RELEASE"):
            named.append(f"{verb} {TABLE.search(sql).group(1)}")
    return named


def test_a_successful_request_costs_two_statements_once_the_key_is_known(client, seeded, free_key, vendor):
    _, secret = free_key
    body = {"model": "local-chat", "messages": HELLO}
    assert post(client, PATH, body, secret).status_code == 200  # authenticates: the key is cached
    with CaptureQueriesContext(connection) as captured:
        assert post(client, PATH, body, secret).status_code == 200
    if vendor == "postgresql":
        # The charge with its ledger row, then the settlement with the usage row: one CTE each.
        assert _statements(captured.captured_queries) == ["WITH keys_apikey", "WITH keys_ledgerentry"]
    else:
        # SQLite has no data-modifying CTE: the same writes, in one transaction each.
        assert _statements(captured.captured_queries) == [
            "UPDATE keys_apikey", "INSERT keys_ledgerentry",
            "UPDATE keys_ledgerentry", "UPDATE keys_apikey", "INSERT models_catalog_usageevent"]


@pytest.mark.postgres
def test_the_two_statements_are_prepared_on_the_connection_that_runs_them(client, seeded, free_key):
    _, secret = free_key
    body = {"model": "local-chat", "messages": HELLO}
    for _ in range(2):
        assert post(client, PATH, body, secret).status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0].lstrip() for row in cursor.fetchall()]
    # As prepared, with $1... for the parameters: told apart by their first CTE, the request's row.
    assert sorted(text.split()[0:2] for text in prepared if "keys_" in text) == sorted(
        text.split()[0:2] for text in (metering_sql.CHARGE, metering_sql.SETTLEMENT))


@pytest.mark.postgres
def test_the_two_statements_send_their_parameters_apart_from_their_text(client, seeded, free_key):
    import psycopg

    _, secret = free_key
    body = {"model": "local-chat", "messages": HELLO}
    assert post(client, PATH, body, secret).status_code == 200
    bound = []

    def record(execute, sql, params, many, context):
        bound.append("client" if isinstance(context["cursor"].cursor, psycopg.ClientCursor) else "server")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        assert post(client, PATH, body, secret).status_code == 200
        # Every other statement keeps Django's client-side binding.
        assert ApiKey.objects.filter(name="no such key").count() == 0
    assert bound == ["server", "server", "client"]


def test_a_failed_upstream_call_refunds_in_one_transaction(client, fake_models, upstream, free_key):
    key, secret = free_key
    upstream.fail_all(500)
    catalog.snapshot()
    assert post(client, PATH, {"model": "fake-chat", "messages": HELLO}, secret).status_code == 502
    charge, refund = LedgerEntry.objects.filter(key=key).exclude(kind="grant").order_by("id")
    assert (charge.kind, charge.amount, charge.status) == ("charge", -1, "refunded")
    assert (refund.kind, refund.amount, refund.charge_id, refund.balance_after) == ("refund", 1, charge.pk, 100)
    assert ApiKey.objects.get(pk=key.pk).credits == 100


def test_a_refused_charge_costs_the_charge_and_one_read_of_why(client, seeded, broke_key):
    _, secret = broke_key
    body = {"model": "local-chat", "messages": HELLO}
    assert post(client, PATH, body, secret).status_code == 402
    # The conditional UPDATE that finds no row, then the read that tells 402 from 401/403/429.
    with CaptureQueriesContext(connection) as captured:
        assert post(client, PATH, body, secret).status_code == 402
    assert _statements(captured.captured_queries) in (["WITH keys_apikey", "SELECT keys_apikey"],
                                                      ["UPDATE keys_apikey", "SELECT keys_apikey"])
    assert not LedgerEntry.objects.filter(kind="charge").exists()


def test_openai_without_credentials_fails_fast_without_a_network_call(client, seeded, free_key, monkeypatch):
    import responses

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    key, secret = free_key
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        response = post(client, PATH, {"model": "gpt-5-mini", "messages": HELLO}, secret)
        assert len(mock.calls) == 0
    error = assert_error(response, 502, "upstream_unavailable", "upstream_error")
    assert "OPENAI_API_KEY is not set" in error["message"]
    assert ApiKey.objects.get(pk=key.pk).credits == 100
    assert UsageEvent.objects.get().success is False


def test_a_developer_message_is_taken_and_forwarded_as_the_client_sent_it(client, fake_models, upstream, free_key):
    _, secret = free_key
    upstream.json("/chat/completions", chat_completion())
    messages = [{"role": "developer", "content": "Answer in French."}, *HELLO]
    assert post(client, PATH, {"model": "fake-chat", "messages": messages}, secret).status_code == 200
    assert upstream.posts()[0].body["messages"][0] == {"role": "developer", "content": "Answer in French."}


ROUTES = {
    **{operation: LOCAL_BODIES[operation] for operation in ("chat", "embedding", "image", "speech")},
    "messages": ("/v1/messages", {"model": "local-chat", "max_tokens": 16,
                                  "messages": [{"role": "user", "content": "Hello"}]}),
    "responses": ("/v1/responses", {"model": "local-chat", "input": "Hello"}),
    "gemini": ("/v1beta/models/local-chat:generateContent", {"contents": [{"parts": [{"text": "Hello"}]}]}),
}


COUNTING = {
    "messages": ("/v1/messages/count_tokens", {"model": "local-chat", "messages": [{"role": "user", "content": "Hi"}]}),
    "responses": ("/v1/responses/input_tokens", {"model": "local-chat", "input": "Hello"}),
    "gemini": ("/v1beta/models/local-chat:countTokens", {"contents": [{"parts": [{"text": "Hello"}]}]}),
}


@pytest.mark.parametrize("route", [*ROUTES, *(f"count {name}" for name in COUNTING)])
def test_a_request_resolves_its_model_once(client, seeded, make_key, monkeypatch, route):
    """The view resolves the model first (what a client learns first, CONTRACT section 4); the pipeline admits
    that resolution, and a count of tokens reads it, instead of looking the model up and checking its type and
    tier again."""
    from gateway import pipeline
    from gateway.responses import chat_request
    resolved = []
    real = pipeline.resolve_model

    def counted(**kwargs):
        resolved.append(kwargs["model_id"])
        return real(**kwargs)

    for module in (pipeline, chat_request):
        monkeypatch.setattr(module, "resolve_model", counted)
    _, secret = make_key(tier="premium", credits=100)
    path, body = COUNTING[route.removeprefix("count ")] if route.startswith("count ") else ROUTES[route]
    response = post(client, path, body, secret)
    assert response.status_code == 200, response.content
    assert resolved == [body.get("model", "local-chat")]


def test_an_answer_that_cannot_be_written_is_refunded_not_charged(client, seeded, free_key, monkeypatch):
    """The answer is written before the charge settles: whatever fails in writing it fails the request, whose
    charge goes back, instead of a 500 after the key paid."""
    from gateway import idempotency
    key, secret = free_key

    def unwritable(body):
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    monkeypatch.setattr(idempotency, "rendered", unwritable)
    response = post(client, PATH, {"model": "local-chat", "messages": HELLO}, secret)
    assert response.status_code == 500
    assert ApiKey.objects.get(pk=key.pk).credits == 100
    assert LedgerEntry.objects.get(kind="charge").status == "refunded"
