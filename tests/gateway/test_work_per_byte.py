"""The gateway's own work on a request grows with the bytes the client sent, at about the rate of a plain body
of one long message, whatever the body is made of: many small tool calls, the local embedding model's input.

Each test counts the work done (calls made, values hashed), never the time it took."""
import hashlib
import json
import math

import pytest

from gateway import local_media
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


# ---------------------------------------------------------------- the local embedding model

def each_occurrence(text: str, dimensions: int) -> list[float]:
    """The embedding as first written: every occurrence of a feature hashed and added on its own."""
    words = [w.lower() for w in local_media._TOKEN_RE.findall(text)]
    features = [("w:" + word, 1.0) for word in words]
    features += [("c:" + f"<{word}>"[i:i + 3], 0.3) for word in words for i in range(len(word))]
    features += [(f"p:{first} {second}", 0.5) for first, second in zip(words, words[1:])]
    vector = [0.0] * dimensions
    for feature, weight in features:
        hashed = int.from_bytes(hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                                "little")
        vector[(hashed >> 1) % dimensions] += weight if hashed & 1 else -weight
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else vector


class CountedHashes:
    def __init__(self):
        self.hashed: list[bytes] = []

    def blake2b(self, data: bytes, **options):
        self.hashed.append(data)
        return hashlib.blake2b(data, **options)


def test_the_local_embedding_hashes_each_distinct_feature_once(monkeypatch):
    """Every occurrence of a word, trigram and word pair was hashed: "a a a …" cost three hashes for every two
    bytes, ten times what a chat request of its size costs the gateway. Each distinct feature is hashed once."""
    counted = CountedHashes()
    monkeypatch.setattr(local_media, "hashlib", counted)
    vector = local_media.embed("a " * 20_000 + "The cat sat. THE CAT SAT!", 64)
    # w:a c:<a> p:a a, w:the c:<th c:the c:he> p:a the, w:cat …, the pairs and marks: each once.
    assert len(counted.hashed) == len(set(counted.hashed)) < 40
    monkeypatch.undo()
    for text in ("a " * 20_000 + "The cat sat. THE CAT SAT!", "aaaa aaaa baaa", "Ünïcödé wörds, ✓✓ and 中文中文 again"):
        assert local_media.embed(text, 64) == pytest.approx(each_occurrence(text, 64), abs=1e-12)
    assert vector == pytest.approx(each_occurrence("a " * 20_000 + "The cat sat. THE CAT SAT!", 64), abs=1e-12)
