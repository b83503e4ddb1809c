"""Gemini's conversation as the conversation shape's turns, both ways: a GenerateContentRequest's contents
decoded into Messages and ToolResults (gateway.gemini_api.contents) and written as chat's messages, those
read back as turns and mapped to Gemini's contents (gateway.upstream.gemini_messages), and an answer's
message with its calls' thought signatures (gateway.upstream.gemini_answer) carried into the next request."""
import pytest

from gateway.conversation import ToolCall
from gateway.conversation_request import (
    AudioPart,
    FilePart,
    ImagePart,
    Message,
    OtherPart,
    TextPart,
    ToolResult,
    conversation_from_chat,
    conversation_to_chat,
)
from gateway.gemini_api.request import chat_request
from gateway.upstream import gemini_answer, gemini_messages
from utils_app.errors import InvalidRequest, UnsupportedParameter

SIGNED = {gemini_answer.SIGNATURE_KEY: {"thought_signature": "c2ln"}}
CONTENTS = [
    {"role": "user", "parts": [{"text": "What is in these?"},
                               {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
                               {"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}},
                               {"inlineData": {"mimeType": "audio/wav", "data": "UklG"}}]},
    {"role": "model", "parts": [{"text": "Let me look."},
                                {"functionCall": {"name": "look", "args": {"at": "Zürich"}}}]},
    {"role": "user", "parts": [{"functionResponse": {"name": "look", "response": {"seen": "a cat"}}}]},
    {"role": "model", "parts": [{"text": "A cat."}]},
]
TURNS = [
    Message("system", "Be brief."),
    Message("user", [TextPart("What is in these?"), ImagePart("data:image/png;base64,iVBO"),
                     FilePart("data:application/pdf;base64,JVBE", "document.pdf"), AudioPart("UklG", "wav")]),
    Message("assistant", "Let me look.", (ToolCall("call_contents_1_parts_1", "look", '{"at": "Zürich"}'),)),
    ToolResult("call_contents_1_parts_1", '{"seen": "a cat"}'),
    Message("assistant", "A cat."),
]


def no_image(url, where):
    raise AssertionError("no image is fetched here")


def test_a_gemini_conversation_decodes_into_turns_and_maps_back_to_the_same_contents():
    body = {"systemInstruction": {"parts": [{"text": "Be brief."}]}, "contents": CONTENTS}
    messages = chat_request(body, "gemini-x").params["messages"]
    assert conversation_from_chat(messages) == TURNS
    assert messages == conversation_to_chat(TURNS)
    system, contents = gemini_messages.conversation(messages, no_image)
    assert system == [{"text": "Be brief."}]
    assert contents == CONTENTS


def test_a_user_turn_of_text_only_is_one_string_and_its_responses_come_first():
    body = {"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "id": "c1"}}]},
                         {"role": "user", "parts": [{"text": "a"}, {"text": "b"},
                                                    {"functionResponse": {"name": "f", "response": "ok"}}]}]}
    assert conversation_from_chat(chat_request(body, "gemini-x").params["messages"]) == [
        Message("assistant", None, (ToolCall("c1", "f", "{}"),)), ToolResult("c1", "ok"), Message("user", "a\nb")]


def test_typed_turns_map_to_gemini_contents_with_the_system_apart_and_one_role_merged():
    turns = [Message("developer", [TextPart("Rules.")]), Message("user", "Hi"), Message("user", [TextPart("there")]),
             Message("assistant", [TextPart("Calling.")], (ToolCall("c1", "f", ""), ToolCall("c2", "g", '{"x": 1}'))),
             ToolResult("c2", "two"), ToolResult("c1", '{"one": 1}'), Message("system", "Late rules.")]
    system, contents = gemini_messages.conversation(conversation_to_chat(turns), no_image)
    assert system == [{"text": "Rules."}, {"text": "Late rules."}]
    assert contents == [
        {"role": "user", "parts": [{"text": "Hi"}, {"text": "there"}]},
        {"role": "model", "parts": [{"text": "Calling."}, {"functionCall": {"name": "f", "args": {}}},
                                    {"functionCall": {"name": "g", "args": {"x": 1}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"one": 1}}},
                                   {"functionResponse": {"name": "g", "response": {"output": "two"}}}]}]


def test_an_answers_thought_signature_rides_on_its_tool_call_into_the_next_request():
    body = {"candidates": [{"content": {"role": "model", "parts": [
        {"text": "Looking."}, {"functionCall": {"name": "look", "args": {"at": 1}, "id": "c1"},
                               "thoughtSignature": "c2ln"}]}, "finishReason": "STOP"}]}
    answer = gemini_answer.completion(body, model="gemini-x", malformed=AssertionError)
    message = answer["choices"][0]["message"]
    assert Message.from_chat(message) == Message("assistant", "Looking.",
                                                 (ToolCall("c1", "look", '{"at": 1}', SIGNED),))
    assert list(message["tool_calls"][0]) == ["id", "type", "function", "extra_content"]
    _, contents = gemini_messages.conversation([{"role": "user", "content": "Look."}, message], no_image)
    assert contents[1] == {"role": "model", "parts": [
        {"text": "Looking."}, {"functionCall": {"name": "look", "args": {"at": 1}}, "thoughtSignature": "c2ln"}]}


def test_a_streamed_calls_thought_signature_is_its_extra_content():
    translation = gemini_answer.StreamTranslation(model="gemini-x", candidates=1)
    chunk = translation.translate({"candidates": [{"content": {"parts": [
        {"functionCall": {"name": "f", "id": "c1"}, "thoughtSignature": "c2ln"}]}}]}, malformed=AssertionError)
    assert chunk["choices"][0]["delta"]["tool_calls"] == [ToolCall("c1", "f", "{}", SIGNED).to_chat(0)]


def test_an_answer_without_calls_writes_a_message_with_no_tool_calls():
    answer = gemini_answer.completion({"candidates": [{"content": {"parts": [{"text": "Hi."}]}}]}, model="gemini-x",
                                      malformed=AssertionError)
    assert answer["choices"][0]["message"] == Message("assistant", "Hi.").to_chat() == \
        {"role": "assistant", "content": "Hi."}


@pytest.mark.parametrize(("part", "error", "param"), [
    ({"type": "input_audio", "input_audio": {"data": "UklG"}}, InvalidRequest, "messages.0.content.0.input_audio"),
    ({"type": "input_audio", "input_audio": {"data": "UklG", "format": "flac"}}, InvalidRequest,
     "messages.0.content.0.input_audio"),
    ({"type": "image_url", "image_url": {"detail": "low"}}, InvalidRequest, "messages.0.content.0.image_url"),
    ({"type": "video", "video": {"url": "https://x.test/a.mp4"}}, UnsupportedParameter, "messages"),
    ({"type": "file", "file": {"file_id": "file-1"}}, UnsupportedParameter, "messages"),
])
def test_a_user_part_gemini_cannot_take_is_refused_naming_it(part, error, param):
    with pytest.raises(error) as caught:
        gemini_messages.conversation([{"role": "user", "content": [part]}], no_image)
    assert caught.value.param == param
    assert "messages.0.content.0" in str(caught.value)


def test_a_part_other_than_text_is_refused_in_an_assistant_or_system_turn():
    for role in ("assistant", "system"):
        turn = Message(role, [OtherPart({"type": "image_url", "image_url": {"url": "https://x.test/a.png"}})])
        with pytest.raises(UnsupportedParameter, match="'image_url'"):
            gemini_messages.conversation(conversation_to_chat([turn]), no_image)


def test_an_earlier_call_without_a_name_or_with_arguments_not_an_object_is_refused():
    for call, param in ((ToolCall("c1", "", "{}"), "messages.0.tool_calls.0.function"),
                        (ToolCall("c1", "f", "[1]"), "messages.0.tool_calls.0.function.arguments")):
        with pytest.raises(InvalidRequest) as caught:
            gemini_messages.conversation(conversation_to_chat([Message("assistant", None, (call,))]), no_image)
        assert caught.value.param == param


def test_a_tool_result_answering_no_earlier_call_is_refused():
    with pytest.raises(InvalidRequest) as caught:
        gemini_messages.conversation(conversation_to_chat([ToolResult("c9", "x")]), no_image)
    assert caught.value.param == "messages.0.tool_call_id"
