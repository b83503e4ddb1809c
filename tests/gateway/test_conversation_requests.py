"""A request's earlier tool calls and their results in the neutral shape (ToolCall, ToolResult): each
inbound wire's calls and results read into chat's messages by its decoder and written back to the same wire
by its adapter, each chat call and result written to each wire, each ToolResult to chat and back, and what a
wire refuses, makes up, leaves out or changes on the way named. The answers' side of the same mappings is
tests/gateway/test_conversation.py's."""
import pytest

from gateway.conversation import ToolCall
from gateway.conversation_request import Message, ToolResult, conversation_from_chat
from gateway.gemini_api.contents import CallIds
from gateway.gemini_api.contents import turn_messages as gemini_turn
from gateway.gemini_api.members import GeminiRequest
from gateway.messages.content import turn_messages as messages_turn
from gateway.messages.translation import Translation
from gateway.responses.chat_request import chat_params
from gateway.upstream import anthropic_messages, gemini_answer, gemini_messages, openai
from gateway.upstream.shapes import call_arguments
from utils_app.errors import InvalidRequest


def no_image(url, where):
    raise AssertionError("no image is fetched here")


def refused(call, *args) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        call(*args)
    return caught.value


# ---------------------------------------------------------------- chat

@pytest.mark.parametrize("result", [ToolResult("call_1", "22 °C, sunny"), ToolResult("call_2", ""),
                                    ToolResult("", '{"a": 1}')])
def test_every_tool_result_goes_to_chat_and_comes_back(result):
    assert ToolResult.from_chat(result.to_chat()) == result
    assert result.to_chat() == {"role": "tool", "tool_call_id": result.call_id, "content": result.content}


def test_a_chat_tool_results_parts_are_its_text_and_an_id_not_a_string_is_not_given():
    message = {"role": "tool", "tool_call_id": 7, "content": [{"type": "text", "text": "a"}, {"type": "x"},
                                                              {"type": "text", "text": "b"}]}
    assert ToolResult.from_chat(message) == ToolResult("", "a b")
    assert ToolResult.from_chat({"role": "tool"}) == ToolResult.from_chat(None) == ToolResult("", "")


def test_an_assistant_turns_calls_are_read_with_its_older_function_call_last():
    message = {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "f", "arguments": '{"a": 1}'}}], "function_call": {"name": "g", "arguments": {"b": "é"}}}
    assert call_arguments(Message.from_chat(message), "messages.1") == \
        [(ToolCall("call_1", "f", '{"a": 1}'), {"a": 1}), (ToolCall("", "g", '{"b": "é"}'), {"b": "é"})]


@pytest.mark.parametrize(("function", "param"), [({"arguments": "{}"}, "messages.1.tool_calls.0.function"),
                                                 ({"name": "", "arguments": "{}"}, "messages.1.tool_calls.0.function"),
                                                 ({"name": "f", "arguments": "[1]"},
                                                  "messages.1.tool_calls.0.function.arguments"),
                                                 ({"name": "f", "arguments": "{"},
                                                  "messages.1.tool_calls.0.function.arguments")])
def test_an_earlier_call_without_a_name_or_with_arguments_not_an_object_is_refused(function, param):
    message = {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": function}]}
    assert refused(call_arguments, Message.from_chat(message), "messages.1").param == param


# ---------------------------------------------------------------- Anthropic

def test_an_anthropic_tool_use_and_its_result_come_in_and_go_back_out():
    use = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Zürich", "days": [1]}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "22 °C"}
    messages = [Message("user", "Weather?"),
                *messages_turn({"role": "assistant", "content": [use]}, "messages.1", Translation()),
                *messages_turn({"role": "user", "content": [result]}, "messages.2", Translation())]
    call = ToolCall("toolu_1", "weather", '{"city": "Zürich", "days": [1]}')
    assert messages[1] == Message("assistant", None, (call,))
    assert messages[2] == ToolResult("toolu_1", "22 °C")
    _, turns = anthropic_messages.conversation(messages)
    assert turns[1:] == [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]


def test_anthropic_makes_a_chat_calls_id_one_it_takes_the_same_for_its_result_and_makes_up_one_not_given():
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call 1/x", "type": "function", "function": {"name": "f", "arguments": ""}}],
                 "function_call": {"name": "g", "arguments": '{"a": 1}'}},
                {"role": "tool", "tool_call_id": "call 1/x", "content": ""}]
    _, turns = anthropic_messages.conversation(conversation_from_chat(messages))
    first, second = turns[1]["content"]
    assert first == {"type": "tool_use", "id": "call_1_x", "name": "f", "input": {}}
    assert second["id"].startswith("call_") and second["input"] == {"a": 1}
    assert turns[2]["content"] == [{"type": "tool_result", "tool_use_id": "call_1_x"}]  # empty content left out


def test_a_messages_tool_use_without_an_id_gets_one_and_an_input_not_an_object_is_refused():
    [message] = messages_turn({"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}, "messages.1",
                              Translation())
    [call] = message.tool_calls
    assert call.id.startswith("call_") and (call.name, call.arguments) == ("f", "{}")
    error = refused(messages_turn, {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": [1]}]},
                    "messages.1", Translation())
    assert (error.param, str(error)) == ("messages.1.content.0.input", "messages.1.content.0.input: must be an object.")


# ---------------------------------------------------------------- Gemini

def test_a_gemini_function_call_and_its_response_come_in_and_go_back_out():
    call = {"functionCall": {"name": "weather", "args": {"city": "Zürich"}}}
    response = {"functionResponse": {"name": "weather", "response": {"temperature": 22}}}
    ids, found = CallIds(), GeminiRequest(params={})
    messages = [{"role": "user", "content": "Weather?"},
                *gemini_turn({"role": "model", "parts": [call]}, "contents.1", ids, found),
                *gemini_turn({"role": "user", "parts": [response]}, "contents.2", ids, found)]
    assert messages[1]["tool_calls"] == [ToolCall("call_contents_1_parts_0", "weather", '{"city": "Zürich"}').to_chat()]
    assert messages[2] == ToolResult("call_contents_1_parts_0", '{"temperature": 22}').to_chat()
    _, contents = gemini_messages.conversation(messages, no_image)
    assert contents[1:] == [{"role": "model", "parts": [call]}, {"role": "user", "parts": [response]}]


def test_gemini_leaves_a_chat_calls_id_out_sends_its_signature_back_and_a_text_result_under_output():
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"},
                     "extra_content": {gemini_answer.SIGNATURE_KEY: {"thought_signature": "c2ln"}}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "done"}]
    _, contents = gemini_messages.conversation(messages, no_image)
    assert contents[1:] == [
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "c2ln"}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"output": "done"}}}]}]


def test_a_gemini_response_not_an_object_reads_as_its_text_and_goes_back_under_output():
    for response, content in (("done", "done"), ([1, 2], "[1, 2]"), (None, "null")):
        result = gemini_answer.tool_result({"name": "f", "response": response}, "call_1")
        assert result == ToolResult("call_1", content)
        assert gemini_answer.function_response_part("f", result) == \
            {"functionResponse": {"name": "f", "response": {"output": content}}}


def test_a_gemini_function_calls_args_not_an_object_are_refused():
    error = refused(gemini_turn, {"role": "model", "parts": [{"functionCall": {"name": "f", "args": [1]}}]},
                    "contents.1", CallIds(), GeminiRequest(params={}))
    assert error.param == "contents.1.parts.0.functionCall.args"


# ---------------------------------------------------------------- Responses

@pytest.mark.parametrize("arguments", ['{"city": "Zürich"}', "[1, 2]", "not JSON"])
def test_a_function_call_item_comes_in_and_goes_back_out(arguments):
    item = {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1", "name": "f",
            "arguments": arguments}
    call = openai.input_tool_call(item)
    assert call == ToolCall("call_1", "f", arguments)
    assert openai.function_call_item(call, item_id="fc_1") == item


@pytest.mark.parametrize("text", ["ls -la", "", "naïve \"quoted\""])
def test_a_custom_tool_call_item_comes_in_as_the_input_member_of_its_arguments_and_goes_back_out(text):
    item = {"id": "ctc_1", "type": "custom_tool_call", "status": "completed", "call_id": "call_1", "name": "shell",
            "input": text}
    call = openai.input_tool_call(item)
    assert call.arguments_object() == {"input": text}
    assert openai.custom_tool_call_item(call, item_id="ctc_1") == item


def test_a_responses_call_and_its_output_are_chats_tool_call_and_tool_message():
    items = [{"type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"a": 1}'},
             {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "output_text", "text": "ok"}]}]
    params, _ = chat_params({"model": "m"}, items, [])
    assert params["messages"] == [{"role": "assistant", "content": None,
                                   "tool_calls": [ToolCall("call_1", "f", '{"a": 1}').to_chat()]},
                                  ToolResult("call_1", "ok").to_chat()]
