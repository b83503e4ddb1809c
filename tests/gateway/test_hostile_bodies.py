"""Hostile bodies on every inbound API: valid requests of each dialect, mutated member by member by a
seeded generator, never earn a 5xx, a stack trace or an error in another dialect's shape, and never
lose a credit (CONTRACT sections 4 and 8-10)."""
import copy
import json
import random

import pytest

from keys.ledger import mismatches
from models_catalog.models import UsageEvent
from tests.gateway.conftest import ANTHROPIC, GOOGLE, OPENAI, credits_of, in_error_shape

pytestmark = pytest.mark.django_db

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

CHAT = {
    "model": "local-chat",
    "messages": [
        {"role": "system", "content": "Be brief"},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "user", "content": "Thanks"},
    ],
    "tools": [{"type": "function", "function": {"name": "weather", "description": "The weather", "parameters": WEATHER}}],
    "tool_choice": "auto",
    "max_tokens": 40,
    "temperature": 0.5,
    "response_format": {"type": "text"},
    "metadata": {"team": "a"},
    "stream": True,
    "stream_options": {"include_usage": True},
}
CHAT_SCHEMA = {"model": "local-chat", "messages": [{"role": "user", "content": "A city"}],
               "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": WEATHER}},
               "tools": [{"type": "function", "function": {"name": "weather", "parameters": WEATHER}}],
               "tool_choice": {"type": "function", "function": {"name": "weather"}}}
EMBEDDING = {"model": "local-embedding", "input": ["Hello", "there"], "encoding_format": "float", "dimensions": 8}

MESSAGES = {
    "model": "local-chat",
    "max_tokens": 64,
    "system": [{"type": "text", "text": "Be brief"}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
            {"type": "text", "text": "Thanks"}]},
    ],
    "tools": [{"name": "weather", "description": "The weather", "input_schema": WEATHER}],
    "tool_choice": {"type": "auto"},
    "metadata": {"user_id": "u1"},
    "temperature": 0.5,
    "stop_sequences": ["END"],
    "stream": True,
}
MESSAGES_THINKING = {"model": "local-chat", "max_tokens": 2048, "messages": [{"role": "user", "content": "Hi"}],
                     "thinking": {"type": "enabled", "budget_tokens": 1024}}

RESPONSES = {
    "model": "local-chat",
    "instructions": "Be brief",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
        {"role": "user", "content": "Thanks"},
    ],
    "tools": [{"type": "function", "name": "weather", "description": "The weather", "parameters": WEATHER},
              {"type": "custom", "name": "shell", "description": "A shell"}],
    "tool_choice": "auto",
    "text": {"format": {"type": "json_schema", "name": "city", "schema": WEATHER}, "verbosity": "low"},
    "reasoning": {"effort": "low", "summary": "auto"},
    "max_output_tokens": 64,
    "metadata": {"team": "a"},
    "store": True,
    "stream": True,
    "include": ["reasoning.encrypted_content"],
}

GEMINI = {
    "contents": [
        {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"text": "sunny"}}},
                                   {"text": "Thanks"}]},
    ],
    "systemInstruction": {"parts": [{"text": "Be brief"}]},
    "tools": [{"functionDeclarations": [{"name": "weather", "description": "The weather", "parameters": WEATHER}]}],
    "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
    "generationConfig": {"temperature": 0.5, "maxOutputTokens": 64, "stopSequences": ["END"],
                         "responseMimeType": "application/json", "responseSchema": WEATHER,
                         "thinkingConfig": {"thinkingBudget": 128, "includeThoughts": True}},
}
GEMINI_EMBED = {"content": {"parts": [{"text": "Hello"}]}, "taskType": "RETRIEVAL_QUERY", "outputDimensionality": 8}
GEMINI_BATCH = {"requests": [{"model": "models/local-embedding", "content": {"parts": [{"text": "Hello"}]}},
                             {"model": "models/local-embedding", "content": {"parts": [{"text": "there"}]}}]}

PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABXA0KLQAAAABJRU5ErkJggg=="
CHAT_MORE = {"model": "local-chat", "n": 1, "stop": ["END"], "seed": 7, "top_p": 0.9, "logprobs": False,
             "user": "u1", "parallel_tool_calls": True, "max_completion_tokens": 30, "reasoning_effort": "low",
             "messages": [{"role": "developer", "content": "Be brief"},
                          {"role": "user", "name": "ann", "content": [
                              {"type": "text", "text": "What is this?"},
                              {"type": "image_url", "image_url": {"url": PIXEL, "detail": "low"}}]}],
             "response_format": {"type": "json_object"}}
IMAGE = {"model": "local-image", "prompt": "a red fox", "size": "64x64", "n": 1, "response_format": "b64_json"}
SPEECH = {"model": "local-speech", "input": "Hello there", "voice": "alloy", "response_format": "wav", "speed": 1.0}
MESSAGES_MORE = {"model": "local-chat", "max_tokens": 64, "system": "Be brief", "top_k": 5, "top_p": 0.9,
                 "messages": [{"role": "user", "content": [
                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                  "data": PIXEL.split(",")[1]}},
                     {"type": "text", "text": "What is this?", "cache_control": {"type": "ephemeral"}}]}],
                 "tools": [{"name": "weather", "input_schema": WEATHER}],
                 "tool_choice": {"type": "tool", "name": "weather", "disable_parallel_tool_use": True}}
RESPONSES_MORE = {"model": "local-chat", "store": False, "parallel_tool_calls": False, "truncation": "auto",
                  "input": [
                      {"type": "message", "role": "user", "content": [
                          {"type": "input_text", "text": "What is this?"},
                          {"type": "input_image", "image_url": PIXEL, "detail": "low"}]},
                      {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Hm"}]},
                      {"type": "custom_tool_call", "call_id": "call_2", "name": "shell", "input": "ls"},
                      {"type": "custom_tool_call_output", "call_id": "call_2", "output": "a b"}],
                  "tools": [{"type": "custom", "name": "shell",
                             "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
                            {"type": "function", "name": "weather", "parameters": WEATHER, "strict": True}],
                  "tool_choice": {"type": "allowed_tools", "mode": "auto",
                                  "tools": [{"type": "function", "name": "weather"}]},
                  "text": {"format": {"type": "json_object"}}}
RESPONSES_CHOICE = {"model": "local-chat", "input": "Weather in Paris?",
                    "tools": [{"type": "function", "name": "weather", "parameters": WEATHER}],
                    "tool_choice": {"type": "function", "name": "weather"}}
GEMINI_MORE = {"contents": [{"role": "user", "parts": [
                   {"text": "What is this?"}, {"inline_data": {"mime_type": "image/png", "data": PIXEL.split(",")[1]}}]}],
               "system_instruction": {"parts": [{"text": "Be brief"}]},
               "tools": [{"function_declarations": [{"name": "weather", "parameters": WEATHER}]}],
               "tool_config": {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["weather"]}},
               "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
               "generation_config": {"candidate_count": 1, "top_p": 0.9, "top_k": 5, "response_mime_type": "text/plain",
                                     "thinking_config": {"thinking_level": "low"}}}

# (name, dialect, routes the body is posted to, valid body)
CASES = [
    ("chat", OPENAI, ["/v1/chat/completions"], CHAT),
    ("chat-schema", OPENAI, ["/v1/chat/completions"], CHAT_SCHEMA),
    ("chat-more", OPENAI, ["/v1/chat/completions"], CHAT_MORE),
    ("embeddings", OPENAI, ["/v1/embeddings"], EMBEDDING),
    ("image", OPENAI, ["/v1/images/generations"], IMAGE),
    ("speech", OPENAI, ["/v1/audio/speech"], SPEECH),
    ("messages-more", ANTHROPIC, ["/v1/messages", "/v1/messages/count_tokens"], MESSAGES_MORE),
    ("responses-more", OPENAI, ["/v1/responses", "/v1/responses/input_tokens"], RESPONSES_MORE),
    ("responses-choice", OPENAI, ["/v1/responses", "/v1/responses/input_tokens"], RESPONSES_CHOICE),
    ("gemini-more", GOOGLE, ["/v1beta/models/local-chat:generateContent",
                             "/v1beta/models/local-chat:countTokens"], GEMINI_MORE),
    ("messages", ANTHROPIC, ["/v1/messages", "/v1/messages/count_tokens"], MESSAGES),
    ("messages-thinking", ANTHROPIC, ["/v1/messages", "/v1/messages/count_tokens"], MESSAGES_THINKING),
    ("responses", OPENAI, ["/v1/responses", "/v1/responses/input_tokens"], RESPONSES),
    ("gemini", GOOGLE, ["/v1beta/models/local-chat:generateContent",
                        "/v1/models/local-chat:streamGenerateContent?alt=sse",
                        "/v1beta/models/local-chat:countTokens"], GEMINI),
    ("gemini-embed", GOOGLE, ["/v1beta/models/local-embedding:embedContent"], GEMINI_EMBED),
    ("gemini-batch", GOOGLE, ["/v1beta/models/local-embedding:batchEmbedContents"], GEMINI_BATCH),
]


def deep_list(depth: int = 200):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


# The last two: a NUL (which PostgreSQL's text and jsonb cannot hold) and a line break after a bidirectional
# override (which a header or a log line must not carry as it is).
REPLACEMENTS = [None, True, 0, -1, 1e308, 2**64, "", "x" * 70000, [], {}, [None], {"": None}, deep_list(),
                float("nan"), float("inf"), "a\x00b", "x\u202e\n"]


def member_paths(value, path=()):
    """Every path to a member or item of a JSON value, outermost first."""
    if isinstance(value, dict):
        for name, member in value.items():
            yield (*path, name)
            yield from member_paths(member, (*path, name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*path, index)
            yield from member_paths(item, (*path, index))


def _parent(body, path):
    for step in path[:-1]:
        body = body[step]
    return body


def mutants(body: dict, rng: random.Random):
    """(label, mutated body) for each way of spoiling each member path of ``body``."""
    for path in member_paths(body):
        for replacement in REPLACEMENTS:
            mutated = copy.deepcopy(body)
            _parent(mutated, path)[path[-1]] = replacement
            yield f"{path} = {str(replacement)[:20]}", mutated
        mutated = copy.deepcopy(body)
        parent = _parent(mutated, path)
        if isinstance(parent, dict):
            del parent[path[-1]]
            yield f"{path} deleted", mutated
        else:
            parent.insert(path[-1], copy.deepcopy(parent[path[-1]]))
            yield f"{path} duplicated", mutated
            mutated = copy.deepcopy(body)
            del _parent(mutated, path)[path[-1]]
            yield f"{path} deleted", mutated
        target = _parent(body, path)[path[-1]]
        if isinstance(target, dict):
            mutated = copy.deepcopy(body)
            _parent(mutated, path)[path[-1]][f"unknown_{rng.randrange(1000)}"] = rng.choice(REPLACEMENTS[:7])
            yield f"{path} + unknown member", mutated


def send(client, secret: str, dialect: str, route: str, body) -> tuple[int, bytes]:
    """The answer's status and whole body (a stream read to its end), the key sent as the dialect's clients do."""
    auth = {ANTHROPIC: {"HTTP_X_API_KEY": secret}, GOOGLE: {"HTTP_X_GOOG_API_KEY": secret}}.get(
        dialect, {"HTTP_AUTHORIZATION": f"Bearer {secret}"})
    data = body if isinstance(body, str) else json.dumps(body)
    response = client.post(route, data, content_type="application/json", **auth)
    return response.status_code, b"".join(response.streaming_content) if response.streaming else response.content


def defects(status: int, content: bytes, dialect: str) -> str | None:
    """What is wrong with an answer to a spoiled body, if anything."""
    if status >= 500:
        return f"{status}: {content[:300]!r}"
    if b"Traceback" in content:
        return f"a traceback: {content[:300]!r}"
    if status >= 400:
        try:
            answer = json.loads(content)
        except ValueError:
            return f"{status} not JSON: {content[:300]!r}"
        if not isinstance(answer, dict) or not in_error_shape(dialect, status, answer):
            return f"{status} in another shape: {content[:300]!r}"
    return None


def sweep(client, make_key, cases=CASES, seed=20261129) -> tuple[int, list[str]]:
    """Every mutant of every case posted to each of its routes: how many were sent, and what was wrong."""
    rng = random.Random(seed)
    found: list[str] = []
    sent = balance = 0
    for name, dialect, routes, body in cases:
        for label, mutated in mutants(body, rng):
            for route in routes:
                if sent % 900 == 0:  # a fresh key before one key's 1000 requests a minute run out
                    key, secret = make_key(tier="premium", credits=10**6, max_credits=10**6, rpm=1000, rph=10000)
                    balance = credits_of(key)
                sent += 1
                status, content = send(client, secret, dialect, route, mutated)
                defect = defects(status, content, dialect)
                now = credits_of(key)
                if status >= 400 and now != balance:
                    defect = f"{status} cost {balance - now} credit(s)"
                balance = now
                if defect:
                    found.append(f"{name} {route} {label}: {defect}")
    return sent, found


# ---------------------------------------------------------------- what the sweep found, one test each

def refused(client, secret, dialect, route, body, param: str | None, code: str = "invalid_value") -> str:
    status, content = send(client, secret, dialect, route, body)
    answer = json.loads(content)
    assert status == 400 and in_error_shape(dialect, status, answer), content
    if dialect == OPENAI:
        assert (answer["error"]["code"], answer["error"]["param"]) == (code, param), answer
    return answer["error"]["message"]


@pytest.mark.parametrize("changes, param", [
    ({"tools": [None]}, "tools.0"),
    ({"tools": [{"name": "weather"}]}, "tools.0"),
    ({"text": {"format": True}}, "text.format.type"),
    ({"text": {"format": {"type": "json_schema", "schema": WEATHER}}}, "text.format.name"),
])
def test_counting_a_responses_input_checks_the_tools_and_text_format_it_reads(client, seeded, free_key, changes,
                                                                               param):
    key, secret = free_key
    body = {"model": "local-chat", "input": "Hello", **changes}
    refused(client, secret, OPENAI, "/v1/responses/input_tokens", body, param)
    refused(client, secret, OPENAI, "/v1/responses", body, param)  # as the request itself is
    assert credits_of(key) == 100 and mismatches() == []


@pytest.mark.parametrize("route", ["/v1/responses", "/v1/responses/input_tokens"])
@pytest.mark.parametrize("choice", [{}, {"": None}, {"type": None}, {"type": 5}])
def test_a_responses_tool_choice_object_without_a_type_is_a_400(client, seeded, free_key, route, choice):
    key, secret = free_key
    body = {**RESPONSES_CHOICE, "tool_choice": choice}
    refused(client, secret, OPENAI, route, body, "tool_choice.type")
    assert credits_of(key) == 100 and not UsageEvent.objects.exists()


@pytest.mark.parametrize("size", [[], {}, [None], {"": None}, [8]])
def test_an_embedding_size_that_is_no_number_is_a_400_in_googles_shape(client, seeded, free_key, size):
    key, secret = free_key
    one = refused(client, secret, GOOGLE, "/v1beta/models/local-embedding:embedContent",
                  {**GEMINI_EMBED, "outputDimensionality": size}, None)
    assert one == "outputDimensionality: must be a positive integer."
    batch = {"requests": [{**item, "outputDimensionality": size} for item in GEMINI_BATCH["requests"]]}
    many = refused(client, secret, GOOGLE, "/v1beta/models/local-embedding:batchEmbedContents", batch, None)
    assert many == "requests.0.outputDimensionality: must be a positive integer."
    assert credits_of(key) == 100 and mismatches() == []


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
@pytest.mark.parametrize("name, dialect, route, body", [
    ("responses", OPENAI, "/v1/responses", {"model": "local-chat", "input": "Hello", "truncation": 0.5}),
    ("chat", OPENAI, "/v1/chat/completions", CHAT_SCHEMA),
    ("messages", ANTHROPIC, "/v1/messages", MESSAGES_THINKING),
    ("gemini", GOOGLE, "/v1beta/models/local-chat:generateContent", {"contents": GEMINI["contents"][:1]}),
])
def test_a_number_json_cannot_carry_is_invalid_json_and_charges_nothing(client, seeded, free_key, number, name,
                                                                        dialect, route, body):
    # The first 0.5 is replaced: on the Responses API an unread member, stored with the response, where NaN
    # failed the JSON column's check after the charge (a 500 that cost a credit); elsewhere the temperature.
    key, secret = free_key
    text = json.dumps({**body, "temperature": 0.5}).replace("0.5", number, 1)
    message = refused(client, secret, dialect, route, text, None, code="invalid_json")
    assert number in message
    assert credits_of(key) == 100 and mismatches() == [] and not UsageEvent.objects.exists()


# ---------------------------------------------------------------- the sweep

def test_every_valid_body_of_the_sweep_is_answered(client, seeded, make_key):
    key, secret = make_key(tier="premium", credits=1000, max_credits=1000)
    for name, dialect, routes, body in CASES:
        for route in routes:
            status, content = send(client, secret, dialect, route, body)
            assert status == 200, (name, route, content[:500])


@pytest.mark.slow
def test_hostile_bodies_earn_a_4xx_in_the_apis_own_shape_and_cost_nothing_lost(client, seeded, make_key):
    sent, found = sweep(client, make_key)
    assert not found, f"{len(found)} of {sent}:\n" + "\n".join(found[:50])
    assert mismatches() == []
