"""Messages of the conversation shape (gateway.conversation_request.Message, Turn) read from chat's and
written back: a decoder's turns reach every adapter as the same chat messages they are read from."""
import pytest

from gateway.conversation import ToolCall
from gateway.conversation_request import (
    ImagePart,
    Message,
    OtherPart,
    TextPart,
    ToolResult,
    content_from_chat,
    conversation_from_chat,
    conversation_to_chat,
)

CHATS = [
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
    {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                 {"type": "image_url", "image_url": {"url": "https://example.com/a.png",
                                                                     "detail": "low"}}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"at\": 1}"}},
        {"id": "call_2", "type": "function", "function": {"name": "read", "arguments": ""},
         "extra_content": {"google": {"thought_signature": "c2ln"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
    {"role": "assistant", "content": "A cat."},
]


@pytest.mark.parametrize("message", CHATS, ids=[message["role"] for message in CHATS])
def test_a_chat_message_reads_as_a_turn_and_writes_back_as_it_was(message):
    assert conversation_to_chat(conversation_from_chat([message])) == [message]


def test_turns_are_typed_values():
    turns = conversation_from_chat(CHATS)
    assert turns[0] == Message("system", "Be brief.")
    assert turns[2].content == [TextPart("What is this?"), ImagePart("https://example.com/a.png", "low")]
    assert turns[3].tool_calls == (ToolCall("call_1", "look", "{\"at\": 1}"),
                                   ToolCall("call_2", "read", "", {"google": {"thought_signature": "c2ln"}}))
    assert turns[4] == ToolResult("call_1", "a cat")


def test_a_part_no_wire_has_is_carried_as_it_came():
    audio_url = {"type": "audio_url", "audio_url": "https://example.com/a.mp3"}
    no_url = {"type": "image_url", "image_url": {}}
    assert content_from_chat([audio_url, no_url]) == [OtherPart(audio_url), OtherPart(no_url)]
    assert Message("user", [OtherPart(audio_url)]).to_chat() == {"role": "user", "content": [audio_url]}


def test_the_older_function_call_reads_as_the_last_tool_call():
    message = {"role": "assistant", "content": None, "function_call": {"name": "look", "arguments": "{}"},
               "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}
    assert [call.name for call in Message.from_chat(message).tool_calls] == ["read", "look"]
    assert Message.from_chat(message).tool_calls[1].id == ""


def test_content_other_than_a_string_or_parts_reads_as_none():
    assert Message.from_chat({"role": "assistant", "content": 3}).content is None
    assert Message.from_chat({"role": "narrator", "content": "x"}).role == "user"


def test_tool_calls_that_are_not_an_array_read_as_none():
    assert Message.from_chat({"role": "assistant", "content": "x", "tool_calls": 5}).tool_calls == ()
