"""Anthropic's wire and the conversation's turns, both directions: a Messages request decoded into typed turns
(gateway.messages.content) and written as chat's messages, those messages read back as turns and mapped to
Anthropic's by its adapter (gateway.upstream.anthropic_messages), and an Anthropic answer's message written
as a typed Message (gateway.upstream.anthropic_answer) and read back into a Messages answer."""
import pytest

from gateway.conversation import ToolCall
from gateway.conversation_request import (
    FilePart,
    ImagePart,
    Message,
    OtherPart,
    TextPart,
    ToolResult,
    conversation_from_chat,
    conversation_to_chat,
)
from gateway.messages.answer import message_object
from gateway.messages.content import turn_messages
from gateway.messages.request import translate
from gateway.messages.translation import Translation
from gateway.upstream import anthropic_answer
from gateway.upstream.anthropic_messages import conversation
from gateway.upstream.anthropic_request import can_think, messages_request
from utils_app.errors import InvalidRequest, UnsupportedParameter

B64 = "iVBORw0KGgo="
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}}
PDF = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": B64}}
USE = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Zürich"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "22 °C"}
# A conversation Anthropic's adapter writes back as the client sent it: turns that alternate, tool results
# first in their turn, every block one the other wires carry.
MESSAGES = [
    {"role": "user", "content": [{"type": "text", "text": "Weather here?"}, IMAGE, PDF]},
    {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}, USE]},
    {"role": "user", "content": [RESULT, {"type": "text", "text": "And tomorrow?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]},
]


def decoded(messages, system=None):
    body = {"model": "claude", "max_tokens": 100, "messages": messages, **({"system": system} if system else {})}
    return translate(body)[0]["messages"]


def refused(kind, call, *args):
    with pytest.raises(kind) as caught:
        call(*args)
    return str(caught.value), caught.value.param


def test_a_messages_conversation_goes_to_chat_and_back_to_anthropic_as_it_came():
    chat = decoded(MESSAGES, system="Be brief.")
    system, messages = conversation(conversation_from_chat(chat))
    assert system == [{"type": "text", "text": "Be brief."}]
    assert messages == MESSAGES


def test_each_anthropic_turn_decodes_into_typed_turns():
    notes = Translation()
    turns = [turn for index, message in enumerate(MESSAGES)
             for turn in turn_messages(message, f"messages.{index}", notes)]
    assert turns == [
        Message("user", [TextPart("Weather here?"), ImagePart(f"data:image/png;base64,{B64}"),
                         FilePart(f"data:application/pdf;base64,{B64}", "document.pdf")]),
        Message("assistant", "Let me look.", (ToolCall("toolu_1", "weather", '{"city": "Zürich"}'),)),
        ToolResult("toolu_1", "22 °C"),
        Message("user", [TextPart("And tomorrow?")]),
        Message("assistant", "Sunny."),
    ]
    assert notes.dropped == []


def test_the_decoder_writes_chats_messages_only_from_the_turns():
    notes = Translation()
    turns = [Message("system", "Be brief.")] + [turn for index, message in enumerate(MESSAGES)
                                                for turn in turn_messages(message, f"messages.{index}", notes)]
    assert decoded(MESSAGES, system="Be brief.") == conversation_to_chat(turns)


def test_a_system_turn_in_mid_conversation_is_a_system_message_in_place_and_joins_the_system_prompt():
    messages = [{"role": "user", "content": "hi"},
                {"role": "system", "content": [{"type": "text", "text": "Reminder."}]},
                {"role": "assistant", "content": "hello"}]
    chat = decoded(messages, system=[{"type": "text", "text": "Be brief."}])
    turns = conversation_from_chat(chat)
    assert turns[0] == Message("system", [TextPart("Be brief.")])
    assert turns[2] == Message("system", [TextPart("Reminder.")])
    system, back = conversation(turns)
    assert system == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Reminder."}]
    assert back == [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}]


def test_an_assistant_turn_that_only_calls_a_tool_has_no_content():
    [turn] = turn_messages({"role": "assistant", "content": [USE]}, "messages.1", Translation())
    assert turn.content is None and turn.to_chat()["content"] is None


def test_a_part_anthropic_does_not_carry_is_refused_naming_its_type():
    turns = [Message("user", [TextPart("a"), OtherPart({"type": "input_text", "text": "b"})])]
    assert refused(UnsupportedParameter, conversation, turns) == (
        "messages.0.content.1: content parts of type 'input_text' are not supported for this model.", "messages")
    turns = [Message("user", [OtherPart({"type": "image_url", "image_url": {}})])]
    assert refused(InvalidRequest, conversation, turns) == (
        "messages.0.content.0.image_url needs a url.", "messages.0.content.0.image_url")


def test_an_earlier_tool_call_goes_out_as_tool_use_and_one_without_a_name_is_refused():
    turns = [Message("user", "go"), Message("assistant", None, (ToolCall("call 1", "f", '{"a": 1}'),)),
             ToolResult("call 1", "done")]
    assert conversation(turns)[1][1:] == [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "done"}]}]
    turns[1] = Message("assistant", None, (ToolCall("call_1", "", "{}"),))
    assert refused(InvalidRequest, conversation, turns) == (
        "messages.1.tool_calls.0.function needs a name.", "messages.1.tool_calls.0.function")


def test_thinking_waits_for_a_tool_calls_round_trip_to_end():
    payload = {"reasoning_effort": "high"}
    calling = [Message("user", "go"), Message("assistant", None, (ToolCall("c", "f", "{}"),)), ToolResult("c", "ok")]
    assert not can_think(payload, calling, 20000)
    assert can_think(payload, [*calling, Message("assistant", "done."), Message("user", "again")], 20000)
    chat = conversation_to_chat(calling)
    assert "thinking" not in messages_request({"model": "m", "messages": chat, "reasoning_effort": "high"},
                                              model="claude", max_tokens_default=20000)


def test_an_anthropic_answer_comes_in_as_a_typed_message_and_goes_back_as_the_same_blocks():
    body = {"id": "msg_1", "content": [{"type": "text", "text": "Looking."}, USE], "stop_reason": "tool_use",
            "usage": {"input_tokens": 3, "output_tokens": 2}}
    completion = anthropic_answer.completion(body, model="m", malformed=InvalidRequest)
    message = completion["choices"][0]["message"]
    assert message == Message("assistant", "Looking.",
                              (ToolCall("toolu_1", "weather", '{"city": "Zürich"}'),)).to_chat()
    assert Message.from_chat(message).to_chat() == message
    answer = message_object(completion, input_tokens=3, output_tokens=2, cached=0)
    assert answer["content"] == body["content"]
    assert answer["stop_reason"] == "tool_use"
