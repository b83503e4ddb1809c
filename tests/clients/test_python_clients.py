"""The Python SDKs and frameworks, unchanged, against a served gateway: each answers one turn, streams, and
makes a tool round trip through `local-chat` (the model calls a function the client's code offers, the
client runs it and sends its result back, the model answers quoting it), with a completed charge and a
usage row per request in the database."""
from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import pytest

from tests.clients.conftest import Matrix, assert_metered

pytestmark = [pytest.mark.clients, pytest.mark.served]

PROMPT = "Say hello to the clients suite."
MARK = "clients-ok-42"
LOOKUP_PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                     "additionalProperties": False}


def lookup(city: str) -> str:
    """The tool every client offers: its answer holds a mark the prompt does not, so an answer quoting the mark
    proves the client ran it and sent its result back."""
    return f"{MARK}: it is sunny in {city}"


@dataclass(frozen=True)
class Client:
    """How one Python client is driven: each function takes (base URL, secret) and returns the answer's text
    (for streaming: the text and how many pieces it came in)."""

    name: str
    package: str
    operations: set[str]
    one_turn: Callable[[str, str], str]
    stream: Callable[[str, str], tuple[str, int]]
    tool_round_trip: Callable[[str, str], str]

    @property
    def version(self) -> str:
        return version(self.package)


# ---------------------------------------------------------------- the openai SDK's Responses API

def _openai(base: str, secret: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{base}/v1", api_key=secret, max_retries=0, timeout=60)


def openai_one_turn(base: str, secret: str) -> str:
    with _openai(base, secret) as client:
        return str(client.responses.create(model="local-chat", input=PROMPT).output_text)


def openai_stream(base: str, secret: str) -> tuple[str, int]:
    with _openai(base, secret) as client, client.responses.stream(model="local-chat", input=PROMPT) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.output_text == "".join(deltas)
    return "".join(deltas), len(deltas)


def openai_tool_round_trip(base: str, secret: str) -> str:
    tools = [{"type": "function", "name": "lookup", "description": "The weather in a city.",
              "parameters": LOOKUP_PARAMETERS, "strict": True}]
    with _openai(base, secret) as client:
        first = client.responses.create(model="local-chat", input="use lookup: Paris", tools=tools)
        calls = [item for item in first.output if item.type == "function_call"]
        assert [call.name for call in calls] == ["lookup"], first
        result = lookup(**json.loads(calls[0].arguments))
        second = client.responses.create(model="local-chat", previous_response_id=first.id, tools=tools,
                                         input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                                 "output": result}])
        return str(second.output_text)


# ---------------------------------------------------------------- the OpenAI Agents SDK, with its defaults

def _agent(base: str, secret: str, tools: list[Any]) -> tuple[Any, Any]:
    import agents
    import openai

    agents.set_tracing_disabled(True)  # its default exports traces to OpenAI's platform
    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=secret, max_retries=0, timeout=60)
    model = agents.OpenAIResponsesModel(model="local-chat", openai_client=client)  # the SDK's default API
    return agents.Agent(name="clients-suite", instructions="Answer briefly.", model=model, tools=tools), client


def agents_one_turn(base: str, secret: str) -> str:
    import agents

    agent, client = _agent(base, secret, [])
    try:
        return str(agents.Runner.run_sync(agent, PROMPT).final_output)
    finally:
        asyncio.run(client.close())


def agents_stream(base: str, secret: str) -> tuple[str, int]:
    import agents
    from openai.types.responses import ResponseTextDeltaEvent

    async def run() -> tuple[str, int]:
        agent, client = _agent(base, secret, [])
        try:
            result = agents.Runner.run_streamed(agent, PROMPT)
            deltas = [event.data.delta async for event in result.stream_events()
                      if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent)]
            assert result.final_output == "".join(deltas)
            return "".join(deltas), len(deltas)
        finally:
            await client.close()

    return asyncio.run(run())


def agents_tool_round_trip(base: str, secret: str) -> str:
    import agents

    agent, client = _agent(base, secret, [agents.function_tool(lookup)])
    try:
        result = agents.Runner.run_sync(agent, "use lookup: Paris", max_turns=4)
        return str(result.final_output)
    finally:
        asyncio.run(client.close())


# ---------------------------------------------------------------- google-genai on the Gemini API

def _genai(base: str, secret: str) -> Any:
    from google import genai
    from google.genai import types

    return genai.Client(api_key=secret, http_options=types.HttpOptions(base_url=base, timeout=60_000))


# Each function keeps its client in a name while it is used: a Client that is dropped closes its connections.

def genai_one_turn(base: str, secret: str) -> str:
    client = _genai(base, secret)
    return str(client.models.generate_content(model="local-chat", contents=PROMPT).text)


def genai_stream(base: str, secret: str) -> tuple[str, int]:
    client = _genai(base, secret)
    chunks = [chunk.text or "" for chunk in client.models.generate_content_stream(model="local-chat",
                                                                                   contents=PROMPT)]
    return "".join(chunks), len(chunks)


def genai_tool_round_trip(base: str, secret: str) -> str:
    from google.genai import types

    # The SDK's automatic function calling: it runs the Python function the model calls and sends the result.
    client = _genai(base, secret)
    config = types.GenerateContentConfig(tools=[lookup])
    answer = client.models.generate_content(model="local-chat", contents="use lookup: Paris", config=config)
    called = [part.function_call.name for content in answer.automatic_function_calling_history or []
              for part in content.parts or [] if part.function_call]
    assert called == ["lookup"], answer
    return str(answer.text)


# ---------------------------------------------------------------- LangChain with use_responses_api

def _langchain(base: str, secret: str) -> Any:
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    return ChatOpenAI(model="local-chat", base_url=f"{base}/v1", api_key=SecretStr(secret), use_responses_api=True,
                      max_retries=0, timeout=60)


def langchain_one_turn(base: str, secret: str) -> str:
    return str(_langchain(base, secret).invoke(PROMPT).text)


def langchain_stream(base: str, secret: str) -> tuple[str, int]:
    pieces = [chunk.text for chunk in _langchain(base, secret).stream(PROMPT)]
    return "".join(pieces), len([piece for piece in pieces if piece])


def langchain_tool_round_trip(base: str, secret: str) -> str:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    lookup_tool = tool(lookup)
    model = _langchain(base, secret).bind_tools([lookup_tool])
    history: list[Any] = [HumanMessage("use lookup: Paris")]
    asked = model.invoke(history)
    assert [call["name"] for call in asked.tool_calls] == ["lookup"], asked
    history += [asked, ToolMessage(lookup_tool.invoke(asked.tool_calls[0]["args"]),
                                   tool_call_id=asked.tool_calls[0]["id"])]
    return str(model.invoke(history).text)


# ---------------------------------------------------------------- LiteLLM's responses()

def _litellm_call(base: str, secret: str, **request: Any) -> Any:
    import litellm

    return litellm.responses(model="openai/local-chat", api_base=f"{base}/v1", api_key=secret, num_retries=0,
                             timeout=60, **request)


def litellm_one_turn(base: str, secret: str) -> str:
    return _output_text(_litellm_call(base, secret, input=PROMPT))


def litellm_stream(base: str, secret: str) -> tuple[str, int]:
    deltas = [event.delta for event in _litellm_call(base, secret, input=PROMPT, stream=True)
              if getattr(event, "type", "") == "response.output_text.delta"]
    return "".join(deltas), len(deltas)


def litellm_tool_round_trip(base: str, secret: str) -> str:
    tools = [{"type": "function", "name": "lookup", "description": "The weather in a city.",
              "parameters": LOOKUP_PARAMETERS}]
    prompt = [{"role": "user", "content": "use lookup: Paris"}]
    first = _litellm_call(base, secret, input=prompt, tools=tools)
    calls = [item for item in first.output if _member(item, "type") == "function_call"]
    assert [_member(call, "name") for call in calls] == ["lookup"], first
    call = calls[0]
    result = lookup(**json.loads(_member(call, "arguments")))
    follow_up = [*prompt, {"type": "function_call", "call_id": _member(call, "call_id"), "name": "lookup",
                           "arguments": _member(call, "arguments")},
                 {"type": "function_call_output", "call_id": _member(call, "call_id"), "output": result}]
    return _output_text(_litellm_call(base, secret, input=follow_up, tools=tools))


def _member(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name)


def _output_text(response: Any) -> str:
    texts = [_member(part, "text") for item in response.output if _member(item, "type") == "message"
             for part in _member(item, "content") if _member(part, "type") == "output_text"]
    return "".join(texts)


CLIENTS = {client.name: client for client in [
    Client("openai", "openai", {"responses"}, openai_one_turn, openai_stream, openai_tool_round_trip),
    Client("openai-agents", "openai-agents", {"responses"}, agents_one_turn, agents_stream,
           agents_tool_round_trip),
    Client("google-genai", "google-genai", {"gemini"}, genai_one_turn, genai_stream, genai_tool_round_trip),
    Client("langchain-openai", "langchain-openai", {"responses"}, langchain_one_turn, langchain_stream,
           langchain_tool_round_trip),
    Client("litellm", "litellm", {"responses"}, litellm_one_turn, litellm_stream, litellm_tool_round_trip),
]}


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_the_client_answers_one_turn(name: str, gateway: str, client_key: Any, matrix: Matrix) -> None:
    client = CLIENTS[name]
    matrix.proves(client.name, client.version, "one-turn")
    key, secret = client_key

    text = client.one_turn(gateway, secret)

    assert text.startswith("This is local-chat") and f'You wrote: "{PROMPT}"' in text, text
    assert_metered(key, operations=client.operations, at_least=1)


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_the_client_streams_the_answer(name: str, gateway: str, client_key: Any, matrix: Matrix) -> None:
    client = CLIENTS[name]
    matrix.proves(client.name, client.version, "streaming")
    key, secret = client_key

    text, pieces = client.stream(gateway, secret)

    assert text.startswith("This is local-chat") and f'You wrote: "{PROMPT}"' in text, text
    assert pieces > 1, f"the answer came in {pieces} piece(s): {text!r}"
    assert_metered(key, operations=client.operations, at_least=1)


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_the_client_runs_its_tool_and_the_model_answers_from_its_result(name: str, gateway: str, client_key: Any,
                                                                        matrix: Matrix) -> None:
    client = CLIENTS[name]
    matrix.proves(client.name, client.version, "tool round trip")
    key, secret = client_key

    text = client.tool_round_trip(gateway, secret)

    assert MARK in text and "lookup" in text, text
    assert_metered(key, operations=client.operations, at_least=2)  # the call, then the answer
