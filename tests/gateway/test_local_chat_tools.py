"""The built-in local-chat model with tools and JSON schemas (CONTRACT section 11, docs/local-models.md):
the rule itself on the model, then through the official openai SDK on /v1/chat/completions and the
anthropic SDK on /v1/messages against a live server, each answer charged once."""
import json
import re
from pathlib import Path

import anthropic
import jsonschema
import openai
import pytest
from pydantic import BaseModel

from gateway import local_models
from gateway.conversation_request import conversation_from_chat
from keys.ledger import mismatches
from keys.models import LedgerEntry
from models_catalog.models import UsageEvent
from tests.gateway.conftest import credits_of

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": CITY}}
# Its text parameter is the second property, but the first of `required`; the others need made-up values.
SEARCH_SCHEMA = {
    "type": "object",
    "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 5}, "query": {"type": "string"},
                   "units": {"$ref": "#/$defs/Units"}, "where": {"$ref": "#/$defs/Place"},
                   "note": {"type": "string"}},
    "required": ["limit", "query", "units", "where"],
    "additionalProperties": False,
    "$defs": {"Units": {"enum": ["metric", "imperial"]},
              "Place": {"type": "object", "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90},
                                                         "tags": {"type": "array", "items": {"type": "string"},
                                                                  "minItems": 2, "uniqueItems": True}},
                        "required": ["lat", "tags"], "additionalProperties": False}},
}
SEARCH = {"type": "function", "function": {"name": "search", "parameters": SEARCH_SCHEMA}}
SHELL_SCHEMA = {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}},
                                                 "timeout": {"type": "integer"}}, "required": ["command"]}


def chat_answer(messages: list[dict], **options):
    """The model's answer to chat's messages, read as the local adapter reads them."""
    return local_models.chat_answer(conversation_from_chat(messages), **options)


def chat_reply(messages: list[dict]) -> str:
    """The model's reply to chat's messages, read as the local adapter reads them."""
    return local_models.chat_reply(conversation_from_chat(messages))


def function_tools(*tools) -> list[tuple[str, dict]]:
    return [(tool["function"]["name"], tool["function"]["parameters"]) for tool in tools]


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# ---------------------------------------------------------------- the rule

def test_with_auto_a_use_line_anywhere_in_the_last_user_message_calls_that_tool_with_the_rest_of_the_line():
    prompt = "Context an agent put first.\nPlease use get_weather: Paris, France  \nThanks!"
    answer = chat_answer(user(prompt), tools=function_tools(SEARCH, WEATHER))
    assert answer.text == "" and answer.tool_call.name == "get_weather"
    assert json.loads(answer.tool_call.arguments) == {"city": "Paris, France"}
    assert answer.tool_call.id.startswith("call_")


@pytest.mark.parametrize("prompt, call", [
    ("What is the weather in Paris?", "auto"),  # no use line
    ("use get_time: Paris", "auto"),  # a tool the request does not have
    ("reuse get_weather: Paris", "auto"),  # not the word "use"
    ("use get_weather: Paris", "none"),
])
def test_otherwise_it_answers_in_text_that_names_it(prompt, call):
    answer = chat_answer(user(prompt), tools=function_tools(WEATHER), call=call)
    assert answer.tool_call is None
    assert answer.text == chat_reply(user(prompt)) and "local-chat" in answer.text


def test_the_last_use_line_naming_a_tool_wins_and_only_the_last_user_message_counts():
    messages = [{"role": "user", "content": "use search: old"}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "use get_weather: Rome\nuse nothing: x\nuse search: cheap flights"}]
    answer = chat_answer(messages, tools=function_tools(WEATHER, SEARCH))
    assert answer.tool_call.name == "search"
    assert json.loads(answer.tool_call.arguments)["query"] == "cheap flights"


def test_the_text_fills_the_first_required_string_and_every_other_required_parameter_gets_a_value_its_schema_accepts():
    answer = chat_answer(user("use search: hotels in Lyon"), tools=function_tools(SEARCH))
    arguments = json.loads(answer.tool_call.arguments)
    jsonschema.validate(arguments, SEARCH_SCHEMA)
    assert arguments["query"] == "hotels in Lyon"
    assert set(arguments) == {"limit", "query", "units", "where"}  # required ones only


def test_an_array_of_strings_gets_the_text_split_into_words():
    answer = chat_answer(user("use shell: ls -la /tmp"), tools=[("shell", SHELL_SCHEMA)])
    assert json.loads(answer.tool_call.arguments) == {"command": ["ls", "-la", "/tmp"]}


def test_required_calls_the_first_tool_with_the_last_user_message_when_no_use_line_names_one():
    answer = chat_answer(user("Weather in Oslo?"), tools=function_tools(WEATHER, SEARCH),
                         call="required")
    assert answer.tool_call.name == "get_weather"
    assert json.loads(answer.tool_call.arguments) == {"city": "Weather in Oslo?"}
    named = chat_answer(user("first\nuse search: flights"), tools=function_tools(WEATHER, SEARCH),
                        call="required")
    assert named.tool_call.name == "search" and json.loads(named.tool_call.arguments)["query"] == "flights"


def test_after_a_tool_result_it_answers_quoting_it_and_naming_the_tool_even_if_the_prompt_asks_for_the_tool():
    call = chat_answer(user("use get_weather: Paris"), tools=function_tools(WEATHER)).tool_call
    messages = [*user("use get_weather: Paris"),
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]},
                {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 °C"}]
    answer = chat_answer(messages, tools=function_tools(WEATHER))
    assert answer.tool_call is None
    assert 'The tool get_weather returned: "Sunny, 21 °C"' in answer.text and "local-chat" in answer.text
    # A forced tool is still called: the client asked for nothing else.
    assert chat_answer(messages, tools=function_tools(WEATHER), call="required").tool_call is not None


def test_calls_and_their_ids_are_deterministic():
    tools = function_tools(WEATHER)
    first = chat_answer(user("use get_weather: Paris"), tools=tools)
    assert first == chat_answer(user("use get_weather: Paris"), tools=tools)
    assert first.tool_call.id != chat_answer(user("use get_weather: Rome"), tools=tools).tool_call.id


SCHEMAS = [
    CITY,
    SEARCH_SCHEMA,
    {"type": "integer", "minimum": 3, "exclusiveMaximum": 10, "multipleOf": 4},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    {"type": "number", "exclusiveMinimum": 1e308, "exclusiveMaximum": 1.5e308},  # no room for +1, no overflow
    {"type": "number", "exclusiveMinimum": 0.1, "exclusiveMaximum": 0.1000000001},
    {"type": "integer", "exclusiveMinimum": -7.5, "maximum": -7},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "minimum": 4,
     "exclusiveMinimum": True},
    {"type": ["null", "integer"], "minimum": -5, "maximum": -2},
    {"type": "string", "minLength": 500, "maxLength": 501},
    {"type": "string", "maxLength": 3},
    {"const": {"fixed": [1, 2]}},
    {"type": "boolean"},
    {"type": "null"},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
               {"properties": {"b": {"type": "integer", "minimum": 5}}, "required": ["b"]}]},
    {"oneOf": [{"type": "null"}, {"type": "object", "properties": {"when": {"type": "string", "format": "date"}},
                                  "required": ["when"]}]},
    {"type": "object", "minProperties": 3, "additionalProperties": {"type": "boolean"}},
    {"type": "array", "contains": {"const": 7}, "items": {"type": "integer"}},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "minItems": 3,
     "items": {"type": "boolean"}},
    {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 3, "uniqueItems": True},
    # Recursion through $ref ends where an anyOf allows null; definitions (draft 7) as well as $defs.
    {"$ref": "#/definitions/Node", "definitions": {"Node": {
        "type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/definitions/Node"}, {"type": "null"}]}},
        "required": ["next"]}}},
    {"type": "object", "properties": {"child": {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
                                      "name": {"type": "string"}}, "required": ["child", "name"]},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_a_json_schema_format_is_answered_with_a_document_the_schema_accepts(schema):
    answer = chat_answer(user("Describe Paris"), schema=schema)
    assert answer.tool_call is None
    jsonschema.validators.validator_for(schema)(schema).validate(json.loads(answer.text))


def test_a_string_schema_is_answered_with_the_reply_itself():
    answer = chat_answer(user("Describe Paris"), schema={"type": "string"})
    assert json.loads(answer.text) == chat_reply(user("Describe Paris"))


def test_a_strict_schema_gets_every_property_and_the_reply_in_its_first_required_string():
    schema = {"type": "object", "properties": {"score": {"type": "number"}, "summary": {"type": "string"},
                                               "extra": {"type": ["string", "null"]}},
              "required": ["score", "summary"], "additionalProperties": False}
    loose = json.loads(chat_answer(user("Rate Paris"), schema=schema).text)
    strict = json.loads(chat_answer(user("Rate Paris"), schema=schema, strict=True).text)
    assert set(loose) == {"score", "summary"} and set(strict) == {"score", "summary", "extra"}
    assert loose["summary"] == chat_reply(user("Rate Paris"))


HOSTILE = [
    {"$ref": "#"},  # itself, for ever
    {"type": "object", "properties": {"self": {"$ref": "#"}}, "required": ["self"]},
    # allOf fanning out four ways at each of thirty levels of $defs
    {"$defs": {**{f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 4} for i in range(30)},
               "d30": {"type": "string"}}, "$ref": "#/$defs/d0"},
    # a billion items of a billion items of billion-character strings
    {"type": "array", "minItems": 10 ** 9, "items": {"type": "array", "minItems": 10 ** 9, "items": {
        "type": "string", "minLength": 10 ** 9}}},
    {"type": "object", "minProperties": 10 ** 9},
    {"type": "object", "properties": {f"p{i}": {"type": "string", "minLength": 4096} for i in range(5000)}},
]


@pytest.mark.parametrize("schema", HOSTILE)
def test_a_hostile_schema_gets_a_bounded_answer(schema):
    answer = chat_answer(user("Hi"), schema=schema, strict=True)
    assert len(answer.text) < 200_000
    call = chat_answer(user("Hi"), tools=[("tool", schema)], call="required").tool_call
    assert isinstance(json.loads(call.arguments), dict) and len(call.arguments) < 200_000


def test_the_examples_of_the_docs_are_what_it_answers():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "local-models.md").read_text()
    prose, after_result = [" ".join(block.split()) for block in re.findall(r"```text\n(.*?)```", docs, re.S)
                           if block.startswith("This is local-chat")]
    assert prose == chat_answer(user("Hello there")).text
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    messages = [*user("use get_weather: Paris"), {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 °C"}]
    assert after_result == chat_answer(messages, tools=function_tools(WEATHER)).text


# ---------------------------------------------------------------- through the openai SDK

@pytest.fixture
def sdk(live_server, seeded, free_key):
    key, secret = free_key
    with openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=secret, max_retries=0, timeout=30) as client:
        yield client, key


def charged(key, answers: int, *, n: int = 1) -> list[UsageEvent]:
    """Each answer charged once by the local provider: a completed charge each (one credit, ``n`` for the
    last), a ledger that reconciles, and a usage row each."""
    assert credits_of(key) == 100 - (answers - 1) - n
    charges = LedgerEntry.objects.filter(kind="charge").order_by("id")
    assert [(c.status, c.provider, c.operation) for c in charges] == [("completed", "local", "chat")] * answers
    assert mismatches() == []
    events = list(UsageEvent.objects.filter(success=True).order_by("id"))
    assert len(events) == answers and all(event.output_tokens > 0 for event in events)
    return events


def test_a_tool_round_trip_through_the_openai_sdk(sdk):
    client, key = sdk
    messages = [{"role": "user", "content": "use get_weather: Paris"}]
    first = client.chat.completions.create(model="local-chat", messages=messages, tools=[WEATHER], tool_choice="auto")
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 °C"}]
    second = client.chat.completions.create(model="local-chat", messages=messages, tools=[WEATHER])
    assert second.choices[0].finish_reason == "stop" and not second.choices[0].message.tool_calls
    assert 'The tool get_weather returned: "Sunny, 21 °C"' in second.choices[0].message.content
    assert "local-chat" in second.choices[0].message.content
    charged(key, 2)


def test_required_and_a_forced_function_through_the_openai_sdk(sdk):
    client, key = sdk
    required = client.chat.completions.create(model="local-chat", messages=[{"role": "user", "content": "Oslo"}],
                                              tools=[WEATHER, SEARCH], tool_choice="required")
    [call] = required.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Oslo"}
    forced = client.chat.completions.create(
        model="local-chat", messages=[{"role": "user", "content": "Oslo"}], tools=[WEATHER, SEARCH],
        tool_choice={"type": "function", "function": {"name": "search"}}, n=2)
    assert [choice.finish_reason for choice in forced.choices] == ["tool_calls", "tool_calls"]
    arguments = json.loads(forced.choices[1].message.tool_calls[0].function.arguments)
    jsonschema.validate(arguments, SEARCH_SCHEMA)
    assert arguments["query"] == "Oslo"
    events = charged(key, 2, n=2)
    assert [event.output_tokens for event in events] == [required.usage.completion_tokens,
                                                         forced.usage.completion_tokens]


def test_allowed_tools_limit_the_tools_it_may_call(sdk):
    client, key = sdk
    only_search = {"type": "allowed_tools", "allowed_tools": {
        "mode": "required", "tools": [{"type": "function", "function": {"name": "search"}}]}}
    forced = client.chat.completions.create(model="local-chat", messages=[{"role": "user", "content": "Nice"}],
                                            tools=[WEATHER, SEARCH], tool_choice=only_search)
    assert forced.choices[0].message.tool_calls[0].function.name == "search"
    only_search["allowed_tools"]["mode"] = "auto"
    ignored = client.chat.completions.create(model="local-chat", tools=[WEATHER, SEARCH], tool_choice=only_search,
                                             messages=[{"role": "user", "content": "use get_weather: Nice"}])
    assert ignored.choices[0].finish_reason == "stop" and "use get_weather: Nice" in ignored.choices[0].message.content
    charged(key, 2)


def test_a_streamed_tool_call_arrives_as_tool_call_deltas(sdk):
    client, key = sdk
    stream = client.chat.completions.create(model="local-chat", tools=[SEARCH], stream=True,
                                            messages=[{"role": "user", "content": "use search: Lyon hotels"}],
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    first = deltas[0].tool_calls[0]
    assert (first.index, first.type, first.function.name) == (0, "function", "search") and first.id.startswith("call_")
    assert all(delta.content is None for delta in deltas)
    arguments = "".join(delta.tool_calls[0].function.arguments for delta in deltas if delta.tool_calls)
    assert len([delta for delta in deltas if delta.tool_calls]) > 2  # the arguments come in pieces
    assert json.loads(arguments)["query"] == "Lyon hotels"
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == "tool_calls"
    assert chunks[-1].usage.completion_tokens > 0
    [event] = charged(key, 1)
    assert event.output_tokens == chunks[-1].usage.completion_tokens
    # The same call as without streaming.
    plain = client.chat.completions.create(model="local-chat", tools=[SEARCH],
                                           messages=[{"role": "user", "content": "use search: Lyon hotels"}])
    assert plain.choices[0].message.tool_calls[0].function.arguments == arguments
    assert plain.choices[0].message.tool_calls[0].id == first.id


class Place(BaseModel):
    name: str
    latitude: float


class Trip(BaseModel):
    summary: str
    days: int
    stops: list[Place]
    home: Place | None


def test_parse_with_a_pydantic_model_through_the_openai_sdk(sdk):
    client, key = sdk
    completion = client.chat.completions.parse(model="local-chat", response_format=Trip,
                                               messages=[{"role": "user", "content": "Plan a trip to Lyon"}])
    trip = completion.choices[0].message.parsed
    assert isinstance(trip, Trip) and "local-chat" in trip.summary and "Plan a trip to Lyon" in trip.summary
    assert json.loads(completion.choices[0].message.content) == trip.model_dump()
    charged(key, 1)


def test_parse_with_a_pydantic_function_tool_through_the_openai_sdk(sdk):
    client, _ = sdk
    completion = client.chat.completions.parse(
        model="local-chat", tools=[openai.pydantic_function_tool(Trip)], tool_choice="required",
        messages=[{"role": "user", "content": "Plan a trip to Lyon"}])
    [call] = completion.choices[0].message.tool_calls
    assert isinstance(call.function.parsed_arguments, Trip)
    assert call.function.parsed_arguments.summary == "Plan a trip to Lyon"


def test_a_json_schema_with_refs_and_a_json_object_through_the_openai_sdk(sdk):
    client, key = sdk
    completion = client.chat.completions.create(
        model="local-chat", messages=[{"role": "user", "content": "Find it"}],
        response_format={"type": "json_schema", "json_schema": {"name": "search", "schema": SEARCH_SCHEMA,
                                                                "strict": True}})
    document = json.loads(completion.choices[0].message.content)
    jsonschema.validate(document, SEARCH_SCHEMA)
    assert "note" in document  # strict: every property
    plain = client.chat.completions.create(model="local-chat", messages=[{"role": "user", "content": "Find it"}],
                                           response_format={"type": "json_object"})
    assert json.loads(plain.choices[0].message.content) == {
        "model": "local-chat", "reply": chat_reply([{"role": "user", "content": "Find it"}])}
    charged(key, 2)


def test_required_without_a_function_tool_has_nothing_to_call_and_is_answered_in_prose(sdk):
    client, key = sdk
    answer = client.chat.completions.create(model="local-chat", messages=[{"role": "user", "content": "Hi"}],
                                            tool_choice="required")
    assert answer.choices[0].finish_reason == "stop" and not answer.choices[0].message.tool_calls
    charged(key, 1)


@pytest.mark.parametrize("changes, param", [
    ({"tool_choice": {"type": "function", "function": {"name": "nowhere"}}, "tools": [WEATHER]}, "tool_choice"),
    ({"tool_choice": {"type": "mystery"}, "tools": [WEATHER]}, "tool_choice.type"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": ""}}, "response_format.type"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": "x"}}, "response_format.json_schema"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "none"}}]},
     "tools.0.function.parameters"),
])
def test_a_request_local_chat_cannot_make_sense_of_is_a_400_naming_it_and_costs_nothing(sdk, changes, param):
    client, key = sdk
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="local-chat", messages=[{"role": "user", "content": "Hi"}],
                                       **changes)
    assert refused.value.body["param"] == param and refused.value.body["type"] == "invalid_request_error"
    assert credits_of(key) == 100 and mismatches() == []


# ---------------------------------------------------------------- through the anthropic SDK on /v1/messages

WEATHER_TOOL = {"name": "get_weather", "description": "The weather in a city", "input_schema": CITY}
SEARCH_TOOL = {"name": "search", "input_schema": SEARCH_SCHEMA}


@pytest.fixture
def claude_sdk(live_server, seeded, free_key):
    key, secret = free_key
    with anthropic.Anthropic(base_url=live_server.url, api_key=secret, max_retries=0, timeout=30) as client:
        yield client, key


class Forecast(BaseModel):
    city: str
    days: int
    sunny: bool


def test_the_anthropic_sdks_parse_gets_a_document_its_schema_accepts(claude_sdk):
    client, key = claude_sdk
    parsed = client.messages.parse(model="local-chat", max_tokens=256, output_format=Forecast,
                                   messages=[{"role": "user", "content": "The forecast for Paris"}])
    assert isinstance(parsed.parsed_output, Forecast)
    [block] = parsed.content
    assert json.loads(block.text) == parsed.parsed_output.model_dump() and parsed.stop_reason == "end_turn"
    charged(key, 1)


def test_an_output_format_that_is_not_a_json_schema_is_a_400_naming_it_and_costs_nothing(claude_sdk):
    client, key = claude_sdk
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="local-chat", max_tokens=64, messages=[{"role": "user", "content": "Hi"}],
                               output_config={"format": {"type": "xml"}})
    assert "output_config.format" in refused.value.body["error"]["message"]
    assert credits_of(key) == 100 and mismatches() == []


def test_a_tool_use_round_trip_through_the_anthropic_sdk(claude_sdk):
    client, key = claude_sdk
    messages = [{"role": "user", "content": [{"type": "text", "text": "Context.\nuse get_weather: Paris"}]}]
    first = client.messages.create(model="local-chat", max_tokens=256, messages=messages, tools=[WEATHER_TOOL])
    assert first.stop_reason == "tool_use" and first.model == "local-chat"
    [block] = first.content
    assert (block.type, block.name, block.input) == ("tool_use", "get_weather", {"city": "Paris"})
    messages += [{"role": "assistant", "content": [block.model_dump()]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id,
                                               "content": [{"type": "text", "text": "Rain, 9 °C"}]}]}]
    second = client.messages.create(model="local-chat", max_tokens=256, messages=messages, tools=[WEATHER_TOOL])
    assert second.stop_reason == "end_turn" and [b.type for b in second.content] == ["text"]
    assert 'The tool get_weather returned: "Rain, 9 °C"' in second.content[0].text
    assert "local-chat" in second.content[0].text
    charged(key, 2)


def test_a_streamed_tool_use_through_the_anthropic_sdk(claude_sdk):
    client, key = claude_sdk
    with client.messages.stream(model="local-chat", max_tokens=256, tools=[WEATHER_TOOL, SEARCH_TOOL],
                                tool_choice={"type": "tool", "name": "search"},
                                messages=[{"role": "user", "content": "Museums in Lyon"}]) as stream:
        events = list(stream)
        message = stream.get_final_message()
    starts = [event for event in events if event.type == "content_block_start"]
    assert [(e.content_block.type, e.content_block.name) for e in starts] == [("tool_use", "search")]
    partial = [event.delta.partial_json for event in events
               if event.type == "content_block_delta" and event.delta.type == "input_json_delta"]
    assert len(partial) > 2
    assert message.stop_reason == "tool_use"
    [block] = message.content
    assert block.input == json.loads("".join(partial)) and block.input["query"] == "Museums in Lyon"
    jsonschema.validate(block.input, SEARCH_SCHEMA)
    # tool_choice "any" picks the first tool.
    anything = client.messages.create(model="local-chat", max_tokens=256, tools=[WEATHER_TOOL, SEARCH_TOOL],
                                      tool_choice={"type": "any"}, messages=[{"role": "user", "content": "Lyon"}])
    assert anything.content[0].name == "get_weather" and anything.content[0].input == {"city": "Lyon"}
    charged(key, 2)


def test_a_forced_tool_the_request_does_not_have_is_a_400_in_anthropics_shape_and_costs_nothing(claude_sdk):
    client, key = claude_sdk
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="local-chat", max_tokens=256, tools=[WEATHER_TOOL],
                               tool_choice={"type": "tool", "name": "nowhere"},
                               messages=[{"role": "user", "content": "Hi"}])
    assert refused.value.body["type"] == "error" and refused.value.body["error"]["type"] == "invalid_request_error"
    assert "nowhere" in refused.value.body["error"]["message"]
    assert credits_of(key) == 100 and mismatches() == []
