"""The tools a request declares and its tool choice in the neutral shape (gateway/conversation_request.py): each
wire's tools and tool choice read into Tool and ToolChoice and written back to the same wire, each chat tool
and choice to chat and back and out to each wire, and what a wire cannot carry named."""
import pytest

from gateway.conversation_request import Tool, ToolChoice
from gateway.gemini_api.members import GeminiRequest
from gateway.gemini_api.request import chat_request
from gateway.messages.request import chat_params as messages_params
from gateway.responses.chat_request import CUSTOM_INPUT, read_tool, read_tool_choice
from gateway.responses.chat_request import chat_params as responses_params
from gateway.upstream import anthropic_request, gemini_request, local
from gateway.upstream.shapes import function_choice, function_tool
from utils_app.errors import InvalidRequest, UnsupportedParameter

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [Tool("weather", SCHEMA, "The weather in a city.", True), Tool("weather", SCHEMA, "", False),
         Tool("now", None, None, None), Tool("now", {"type": "object", "properties": {}}, "Ünïcode", None)]
CHOICES = [ToolChoice("auto"), ToolChoice("none"), ToolChoice("required"), ToolChoice("required", forced="weather"),
           ToolChoice("auto", allowed=("weather", "now")), ToolChoice("required", allowed=())]


# ---------------------------------------------------------------- chat

@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_goes_to_chat_and_comes_back(tool):
    assert Tool.from_chat(tool.to_chat()) == tool


def test_a_chat_tool_writes_its_members_in_order():
    tool = Tool("weather", SCHEMA, "d", True)
    assert list(tool.to_chat()["function"]) == ["name", "parameters", "description", "strict"]
    assert Tool("now").to_chat() == {"type": "function", "function": {"name": "now"}}


def test_a_chat_tool_of_another_type_is_no_tool_and_members_of_the_wrong_type_are_not_given():
    assert Tool.from_chat({"type": "custom", "custom": {"name": "c"}}) is None
    assert Tool.from_chat({"type": "web_search"}) is None
    assert Tool.from_chat({"type": "function", "function": {"name": "f", "parameters": True, "description": 4,
                                                            "strict": "yes"}}) == Tool("f")


@pytest.mark.parametrize("choice", CHOICES)
def test_every_tool_choice_goes_to_chat_and_comes_back(choice):
    assert ToolChoice.from_chat(choice.to_chat()) == choice


def test_chat_tool_choices_read_as_their_mode_and_what_is_not_typed_is_none():
    assert ToolChoice.from_chat("required") == ToolChoice("required")
    assert ToolChoice.from_chat({"type": "function", "function": {"name": "f"}}) == ToolChoice("required",
                                                                                               forced="f")
    allowed = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "f"}}, {"type": "custom", "custom": {"name": "c"}}]}}
    assert ToolChoice.from_chat(allowed) == ToolChoice("required", allowed=("f",))  # a custom tool is not carried
    for untyped in ("bogus", 5, {"type": "custom", "custom": {"name": "c"}}, {"type": "function", "function": {}},
                    {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
                        {"type": "function", "function": {}}]}}):
        assert ToolChoice.from_chat(untyped) is None


# ---------------------------------------------------------------- Anthropic

def anthropic_in(tools, choice=None) -> dict:
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    return messages_params({**body, "tool_choice": choice} if choice else body)


def test_an_anthropic_tool_is_read_to_chat_and_written_back():
    tool = {"name": "weather", "description": "The weather.", "input_schema": SCHEMA, "strict": True}
    assert anthropic_request.read_tool(tool) == Tool("weather", SCHEMA, "The weather.", True)
    [chat] = anthropic_in([tool])["tools"]
    assert list(chat["function"]) == ["name", "parameters", "description", "strict"]
    # Anthropic takes no strict: it is the one member that does not come back.
    written = anthropic_request.tool_definition(function_tool(chat, 0), 0)
    assert written == {"name": "weather", "input_schema": SCHEMA, "description": "The weather."}


@pytest.mark.parametrize(("theirs", "chat"), [({"type": "auto"}, "auto"), ({"type": "any"}, "required"),
                                              ({"type": "tool", "name": "weather"},
                                               {"type": "function", "function": {"name": "weather"}})])
def test_an_anthropic_tool_choice_is_read_to_chat_and_written_back(theirs, chat):
    tool = {"name": "weather", "input_schema": SCHEMA}
    assert anthropic_in([tool], theirs)["tool_choice"] == chat
    back = anthropic_request.tool_choice(function_choice(chat), parallel=None)
    assert back == theirs and anthropic_request.read_tool_choice(back).to_chat() == chat


def test_anthropic_none_goes_back_and_parallel_false_is_disable_parallel_tool_use():
    assert anthropic_request.tool_choice(anthropic_request.read_tool_choice({"type": "none"}), parallel=None) == \
        {"type": "none"}
    assert anthropic_request.tool_choice(ToolChoice("required"), parallel=False) == \
        {"type": "any", "disable_parallel_tool_use": True}
    assert anthropic_request.tool_choice(None, parallel=False) == {"type": "auto", "disable_parallel_tool_use": True}


def test_anthropic_fills_in_an_object_schema_and_leaves_out_an_empty_description():
    assert anthropic_request.tool_definition(Tool("now", None, "", True), 0) == \
        {"name": "now", "input_schema": {"type": "object", "properties": {}}}


# ---------------------------------------------------------------- Gemini

def gemini_in(declarations, config=None) -> GeminiRequest:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "tools": [{"functionDeclarations": declarations}]}
    return chat_request({**body, "toolConfig": config} if config else body, "m")


def test_a_gemini_declaration_is_read_to_chat_and_written_back():
    theirs = {"name": "weather", "description": "The weather.",
              "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}}
    [chat] = gemini_in([theirs]).params["tools"]
    assert Tool.from_chat(chat) == Tool("weather", SCHEMA, "The weather.")
    assert gemini_request.declaration(function_tool(chat, 0), 0) == theirs


def test_gemini_leaves_out_strict_an_empty_description_and_parameters_without_properties():
    assert gemini_request.declaration(Tool("now", {"type": "object", "properties": {}}, "", True), 0) == \
        {"name": "now"}
    [chat] = gemini_in([{"name": "now"}]).params["tools"]
    assert chat == {"type": "function", "function": {"name": "now",
                                                     "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize(("theirs", "chat"), [
    ({"mode": "AUTO"}, "auto"), ({"mode": "NONE"}, "none"), ({"mode": "ANY"}, "required"),
    ({"mode": "ANY", "allowedFunctionNames": ["weather"]}, {"type": "function", "function": {"name": "weather"}})])
def test_a_gemini_calling_config_is_read_to_chat_and_written_back(theirs, chat):
    found = gemini_in([{"name": "weather"}], {"functionCallingConfig": theirs})
    assert found.params["tool_choice"] == chat and found.ignored == []
    assert gemini_request.calling_config(function_choice(chat)) == theirs


def test_gemini_names_the_allowed_functions_it_cannot_carry_and_validated_is_auto():
    found = gemini_in([{"name": "a"}, {"name": "b"}], {"functionCallingConfig": {
        "mode": "ANY", "allowedFunctionNames": ["a", "b"]}})
    assert found.params["tool_choice"] == "required"
    assert found.ignored == ["toolConfig.functionCallingConfig.allowedFunctionNames"]
    assert gemini_request.read_calling_config("VALIDATED", []) == ToolChoice("auto")


# ---------------------------------------------------------------- Responses

def responses_in(tools, choice=None) -> dict:
    body = {"model": "m", "tools": tools, **({"tool_choice": choice} if choice else {})}
    return responses_params(body, [{"type": "message", "role": "user", "content": "hi"}], [])[0]


def test_a_responses_function_tool_is_read_to_chat():
    theirs = {"type": "function", "name": "weather", "description": "The weather.", "parameters": SCHEMA,
              "strict": True}
    [chat] = responses_in([theirs])["tools"]
    assert list(chat["function"]) == ["name", "parameters", "description", "strict"]
    assert read_tool(theirs) == Tool.from_chat(chat) == Tool("weather", SCHEMA, "The weather.", True)


def test_a_responses_custom_tool_is_a_function_of_its_input():
    theirs = {"type": "custom", "name": "sql", "description": "Runs SQL.",
              "format": {"type": "grammar", "syntax": "regex", "definition": "SELECT .+"}}
    tool = read_tool(theirs)
    assert tool.parameters == CUSTOM_INPUT and tool.description.startswith("Runs SQL.\n\nThe input must follow")
    assert responses_in([theirs])["tools"] == [tool.to_chat()]
    assert read_tool({"type": "function", "name": "now", "description": ""}) == \
        Tool("now", {"type": "object", "properties": {}})


@pytest.mark.parametrize(("theirs", "choice"), [
    ("auto", ToolChoice("auto")), ("required", ToolChoice("required")),
    ({"type": "function", "name": "weather"}, ToolChoice("required", forced="weather")),
    ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "weather"}]},
     ToolChoice("auto", allowed=("weather",)))])
def test_a_responses_tool_choice_is_read(theirs, choice):
    assert read_tool_choice(theirs) == choice


def test_responses_allowed_tools_narrow_the_chat_tools_and_a_built_in_tool_forced_is_not_typed():
    tools = [{"type": "function", "name": "a"}, {"type": "custom", "name": "b"}]
    params = responses_in(tools, {"type": "allowed_tools", "mode": "required", "tools": [{"type": "custom",
                                                                                         "name": "b"}]})
    assert [tool["function"]["name"] for tool in params["tools"]] == ["b"] and params["tool_choice"] == "required"
    assert responses_in(tools, {"type": "custom", "name": "b"})["tool_choice"] == \
        {"type": "function", "function": {"name": "b"}}
    assert read_tool_choice({"type": "web_search_preview"}) is None
    assert "tool_choice" not in responses_in(tools, {"type": "web_search_preview"})


# ---------------------------------------------------------------- chat out to each wire

@pytest.mark.parametrize("choice", CHOICES)
def test_each_chat_tool_choice_goes_to_each_wire_or_is_refused_naming_it(choice):
    chat = choice.to_chat()
    if choice.allowed is not None:  # neither Anthropic nor Gemini can narrow the tools
        with pytest.raises(UnsupportedParameter) as refused:
            function_choice(chat)
        assert refused.value.param == "tool_choice"
        return
    typed = function_choice(chat)
    assert anthropic_request.read_tool_choice(anthropic_request.tool_choice(typed, parallel=None)) == typed
    config = gemini_request.calling_config(typed)
    assert gemini_request.read_calling_config(config["mode"], config.get("allowedFunctionNames", [])) == typed


@pytest.mark.parametrize("tool", TOOLS)
def test_each_chat_tool_goes_to_each_wire(tool):
    anthropic = anthropic_request.tool_definition(function_tool(tool.to_chat(), 0), 0)
    assert anthropic["name"] == tool.name and anthropic["input_schema"]["type"] == "object"
    assert ("description" in anthropic) == bool(tool.description)
    gemini = gemini_request.declaration(function_tool(tool.to_chat(), 0), 0)
    assert ("parameters" in gemini) == bool(tool.parameters and tool.parameters.get("properties"))
    assert local._function_tools([tool.to_chat()]) == [(tool.name, tool.parameters or {})]


def test_a_tool_of_another_type_is_refused_by_anthropic_and_gemini_and_skipped_by_local_chat():
    custom = {"type": "custom", "custom": {"name": "c"}}
    with pytest.raises(UnsupportedParameter) as refused:
        function_tool(custom, 3)
    assert refused.value.param == "tools" and refused.value.message.startswith("tools.3: tools of type 'custom'")
    assert local._function_tools([custom]) == []


def test_local_chat_reads_each_choice_and_refuses_one_naming_a_tool_it_lacks():
    tools = [("weather", SCHEMA), ("now", {})]
    assert local._tool_choice(ToolChoice("required", forced="now").to_chat(), tools) == ("required", [tools[1]])
    assert local._tool_choice(ToolChoice("auto", allowed=("now",)).to_chat(), tools) == ("auto", [tools[1]])
    assert local._tool_choice("required", []) == ("none", [])
    with pytest.raises(InvalidRequest) as refused:
        local._tool_choice(ToolChoice("required", forced="zz").to_chat(), tools)
    assert refused.value.param == "tool_choice"
    with pytest.raises(InvalidRequest) as refused:
        local._tool_choice({"type": "custom", "custom": {"name": "c"}}, tools)
    assert refused.value.param == "tool_choice"
