"""The Responses API's input, and the local models, on the conversation's typed messages: a Responses
conversation decodes into Turns that chat's messages carry and give back, a translated Responses answer's
message reads back as the Message it was written from, and the local chat model answers the Turns of a
conversation as it always answered its chat messages (the same text, the same call ids)."""
from gateway.conversation import ToolCall
from gateway.conversation_request import (
    ImagePart,
    Message,
    TextPart,
    ToolResult,
    conversation_from_chat,
    conversation_to_chat,
)
from gateway.responses.chat_request import chat_params
from gateway.responses.request import input_items
from gateway.upstream import local
from gateway.upstream.openai import responses_completion

IMAGE = "https://example.com/cat.png"
TURNS = [
    Message("system", "Be brief."),
    Message("developer", "Answer in French. Politely."),
    Message("user", [TextPart("What is this?"), ImagePart(IMAGE, "low")]),
    Message("assistant", None, (ToolCall("call_1", "look", '{"at": "cat"}'),
                                ToolCall("call_2", "shell", '{"input": "ls"}'))),
    ToolResult("call_1", "A cat. Grey."),
    ToolResult("call_2", "cat.png"),
    Message("assistant", "Un chat.", (ToolCall("call_3", "look", "{}"),)),
]


def responses_body() -> dict:
    """A Responses request whose conversation is TURNS, in every form its items take."""
    return {"model": "m", "instructions": "Be brief.", "tools": [{"type": "custom", "name": "shell"}], "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Answer in French."},
                                                             {"type": "input_text", "text": "Politely."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                     {"type": "input_image", "image_url": IMAGE, "detail": "low"}]},
        {"type": "function_call", "call_id": "call_1", "name": "look", "arguments": '{"at": "cat"}'},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "shell", "input": "ls"},
        {"type": "reasoning", "summary": []},
        {"type": "function_call_output", "call_id": "call_1",
         "output": [{"type": "input_text", "text": "A cat."}, {"type": "input_text", "text": "Grey."}]},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "cat.png"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Un chat."}]},
        {"type": "function_call", "call_id": "call_3", "name": "look", "arguments": "{}"},
    ]}


def decoded(body: dict) -> list[dict]:
    params, _ = chat_params(body, input_items(body), [])
    return params["messages"]


def test_a_responses_conversation_decodes_into_turns_that_chat_messages_carry_and_give_back():
    messages = decoded(responses_body())
    assert conversation_from_chat(messages) == TURNS
    assert conversation_to_chat(TURNS) == messages


def test_a_call_after_an_assistant_message_that_wrote_nothing_joins_it_without_content():
    body = {"model": "m", "input": [
        {"type": "message", "role": "assistant", "content": ""},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]}
    assert decoded(body) == [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]


def test_a_translated_responses_answer_writes_the_message_its_output_says():
    completion = responses_completion({"id": "resp_1", "status": "completed", "output": [
        {"type": "message", "content": [{"type": "output_text", "text": "Un "},
                                        {"type": "output_text", "text": "chat."}]},
        {"type": "function_call", "call_id": "call_3", "name": "look", "arguments": "{}"}]})
    message = completion["choices"][0]["message"]
    assert Message.from_chat(message) == TURNS[-1]
    assert message == TURNS[-1].to_chat()
    assert completion["choices"][0]["finish_reason"] == "tool_calls"


# The local chat model's answers to one conversation, as they were before it read Turns: the fingerprint
# (and so the text and a call's id) is a digest of each turn's role and text, which must not move.
CHAT = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                     {"type": "image_url", "image_url": {"url": IMAGE}},
                                     {"type": "output_text", "text": "use get_weather: Paris"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1",
         "content": [{"type": "text", "text": "Sunny"}, {"type": "text", "text": "21 C"}]},
        {"role": "developer", "content": "Answer in French."}]
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
HEAD = "This is local-chat, a deterministic test model running inside the gateway (not an AI). "


def test_the_local_model_quotes_a_tool_result_naming_the_tool_its_call_named():
    answer = local._answer({"messages": CHAT, "tools": WEATHER})
    assert answer.tool_call is None
    assert answer.text == HEAD + 'The tool get_weather returned: "Sunny 21 C" Fingerprint a97ab442ee14.'


def test_the_local_model_calls_the_tool_a_text_part_names_with_an_id_from_the_conversation():
    call = local._answer({"messages": CHAT[:2], "tools": WEATHER}).tool_call
    assert call == ToolCall("call_4d09c317fe63ac3b83fe60d2", "get_weather", '{"city": "Paris"}')


def test_the_local_model_reads_the_text_of_every_part_that_has_some():
    answer = local._answer({"messages": CHAT[:2], "tools": WEATHER, "tool_choice": "none"})
    assert answer.text == HEAD + ('Your message has 4 words, 31 characters and about 9 tokens. '
                                  'You wrote: "Weather? use get_weather: Paris" Fingerprint 08734a32ed15.')


def test_the_local_model_takes_a_function_without_parameters_or_with_null_ones():
    tools = [{"type": "function", "function": {"name": "ping"}},
             {"type": "function", "function": {"name": "pong", "parameters": None}}]
    assert local._function_tools(tools) == [("ping", {}), ("pong", {})]
