"""The gateway's own work on a request grows with the bytes the client sent, at about the rate of a plain body
of one long message, whatever the body is made of: many small tool calls, the local embedding model's input.

Each test counts the work done (calls made, values hashed), never the time it took."""
import json

from gateway.tool_serializers import ToolCall
from keys.ledger import mismatches
from tests.conftest import bearer

CALLS = 500


def chat_with_calls(calls: list) -> dict:
    return {"model": "local-chat", "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": call.get("id", "x"), "content": "ok"} for call in calls[:1])]}


def call(number: int) -> dict:
    return {"id": f"c{number}", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def test_many_small_tool_calls_are_checked_without_a_walk_over_each_ones_fields(client, seeded, local_key,
                                                                                 monkeypatch):
    """Each tool call checked DRF's way cost some 60 µs, so a body of small calls cost six times a plain body of
    its size (a Gemini functionCall part is a tool call of 40 bytes). A valid one now takes the quick path."""
    _, secret = local_key
    walked = []
    drf = ToolCall.to_internal_value
    monkeypatch.setattr(ToolCall, "to_internal_value", lambda self, data: walked.append(data) or drf(self, data))
    answer = client.post("/v1/chat/completions", json.dumps(chat_with_calls([call(n) for n in range(CALLS)])),
                         content_type="application/json", **bearer(secret))
    assert answer.status_code == 200, answer.content
    parts = [{"functionCall": {"name": "f", "args": {"n": n}}} for n in range(CALLS)]
    contents = [{"role": "user", "parts": [{"text": "Hi"}]}, {"role": "model", "parts": parts}]
    answer = client.post("/v1beta/models/local-chat:generateContent", json.dumps({"contents": contents}),
                         content_type="application/json", HTTP_X_GOOG_API_KEY=secret)
    assert answer.status_code == 200, answer.content
    assert walked == []
    # A call the quick check cannot vouch for is DRF's to judge, which names the member.
    for spoilt in ({"type": "function", "function": {}}, {**call(7), "id": ""}, {**call(7), "function": "f"},
                   {**call(7), "type": None}):
        calls = [call(n) for n in range(CALLS - 1)] + [spoilt]
        answer = client.post("/v1/chat/completions", json.dumps(chat_with_calls(calls)),
                             content_type="application/json", **bearer(secret))
        assert answer.status_code == 400, answer.content
        assert answer.json()["error"]["param"].startswith(f"messages.1.tool_calls.{CALLS - 1}."), answer.content
    assert mismatches() == []
