"""A fake upstream speaking OpenAI's Responses API natively, on 127.0.0.1, held to the openai SDK's types.

It serves ``POST /v1/responses`` (a response object, or with ``"stream": true`` the event stream) over a
real socket. Each request is checked against the SDK's own request type (``ResponseCreateParams``) and
the rules a gateway must keep: ``store`` is false (the gateway keeps the state), no
``previous_response_id`` (the conversation comes whole), and encrypted reasoning goes back only to the
account that made it (else the 400 ``invalid_encrypted_content`` OpenAI answers). Every answer is built
as the SDK's ``Response`` type, so what the gateway relays is what OpenAI sends.

The answer is text (``text``), or a call of the first function tool when the last user text says
``use <tool>``; with ``include: ["reasoning.encrypted_content"]`` a reasoning item comes first, its
encrypted content marked with the fake's ``account``.
"""
import json
import re

from openai.types.responses import Response
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import TypeAdapter, ValidationError

from tests.gateway.fake_servers import FakeHandler, FakeServer

_REQUEST = TypeAdapter(ResponseCreateParamsNonStreaming)
USE = re.compile(r"use (?P<tool>[\w-]+)")


def _texts(item: dict) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") for part in content or () if isinstance(part, dict))


class FakeResponsesAPI(FakeServer):
    def __init__(self, *, account: str = "acct-a", text: str = "Hello from the Responses API"):
        self.account = account
        self.text = text
        self.calls: list[dict] = []
        self.problems: list[str] = []
        self.made = 0
        # (status, body) every call is answered with instead, when set: an upstream refusing its secret, say.
        self.refusal: tuple[int, dict] | None = None
        fake = self

        class Handler(FakeHandler):
            def do_POST(self):
                body = self.read_json()
                if not isinstance(body, dict) or self.path != "/v1/responses":
                    return self.send_body(404, {"error": {"message": "Not found", "type": "invalid_request_error",
                                                          "param": None, "code": None}})
                fake.calls.append(body)
                if fake.refusal is not None:
                    return self.send_body(*fake.refusal)
                problem = fake.check(body)
                if problem is not None:
                    fake.problems.append(problem[1])
                    return self.send_body(400, {"error": {"message": problem[1], "type": "invalid_request_error",
                                                          "param": None, "code": problem[0]}})
                response = fake.response(body)
                if body.get("stream"):
                    return self.send_events(200, fake.events(response), _encode)
                self.send_body(200, response)

        self.serve(Handler)

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def check(self, body: dict) -> tuple[str | None, str] | None:
        try:
            _REQUEST.validate_python({name: value for name, value in body.items() if name != "stream"})
        except ValidationError as exc:
            error = exc.errors()[0]
            return None, f"{'.'.join(map(str, error['loc']))}: {error['msg']}"
        if body.get("store") is not False:
            return None, "store: the gateway must call with store: false"
        if body.get("previous_response_id") is not None:
            return "previous_response_not_found", "previous_response_id: nothing is stored here"
        for item in body.get("input") or ():
            if isinstance(item, dict) and item.get("type") == "reasoning":
                content = item.get("encrypted_content")
                if not isinstance(content, str) or not content.startswith(f"enc:{self.account}:"):
                    return ("invalid_encrypted_content",
                            "The encrypted content for item rs_1 could not be verified.")
        return None

    def response(self, body: dict) -> dict:
        self.made += 1
        items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
        last = next((item for item in reversed(items) if isinstance(item, dict)
                     and item.get("role") == "user"), {})
        asked = USE.search(_texts(last))
        tools = {tool.get("name"): tool for tool in body.get("tools") or () if tool.get("type") == "function"}
        answered = any(item.get("type") == "function_call_output" for item in items[-1:])
        output: list[dict] = []
        if "reasoning.encrypted_content" in (body.get("include") or ()):
            output.append({"id": f"rs_{self.made}", "type": "reasoning", "summary": [],
                           "encrypted_content": f"enc:{self.account}:{self.made}"})
        if asked and asked["tool"] in tools and not answered:
            output.append({"id": f"fc_{self.made}", "type": "function_call", "status": "completed",
                           "call_id": f"call_{self.made}", "name": asked["tool"],
                           "arguments": json.dumps({"text": "Paris"})})
        else:
            text = self.text if not answered else f"{self.text}: the tool said {_texts({'content': items[-1]['output']})}"
            output.append({"id": f"msg_{self.made}", "type": "message", "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]})
        response = {"id": f"resp_upstream_{self.made}", "object": "response", "created_at": 1700000000,
                    "status": "completed", "error": None, "incomplete_details": None,
                    "instructions": body.get("instructions"), "model": body["model"], "output": output,
                    "parallel_tool_calls": True, "temperature": 1.0, "tool_choice": "auto",
                    "tools": body.get("tools") or [], "top_p": 1.0, "store": False, "metadata": {},
                    "usage": {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0}, "output_tokens": 5,
                              "output_tokens_details": {"reasoning_tokens": 1}, "total_tokens": 17}}
        return Response.model_validate(response).model_dump(mode="json", exclude_unset=True)

    @staticmethod
    def events(response: dict) -> list[dict]:
        """The event stream OpenAI sends for ``response``, numbered from 0."""
        opening = {**response, "status": "in_progress", "output": [], "usage": None}
        events: list[dict] = [{"type": "response.created", "response": opening},
                              {"type": "response.in_progress", "response": opening}]
        for index, item in enumerate(response["output"]):
            started = {**item, "status": "in_progress"} if item["type"] != "reasoning" else item
            if item["type"] == "message":
                started = {**started, "content": []}
            elif item["type"] == "function_call":
                started = {**started, "arguments": ""}
            events.append({"type": "response.output_item.added", "output_index": index, "item": started})
            if item["type"] == "message":
                part = item["content"][0]
                events.append({"type": "response.content_part.added", "item_id": item["id"], "output_index": index,
                               "content_index": 0, "part": {**part, "text": ""}})
                half = len(part["text"]) // 2
                for piece in (part["text"][:half], part["text"][half:]):
                    events.append({"type": "response.output_text.delta", "item_id": item["id"],
                                   "output_index": index, "content_index": 0, "delta": piece, "logprobs": []})
                events += [{"type": "response.output_text.done", "item_id": item["id"], "output_index": index,
                            "content_index": 0, "text": part["text"], "logprobs": []},
                           {"type": "response.content_part.done", "item_id": item["id"], "output_index": index,
                            "content_index": 0, "part": part}]
            elif item["type"] == "function_call":
                events += [{"type": "response.function_call_arguments.delta", "item_id": item["id"],
                            "output_index": index, "delta": item["arguments"]},
                           {"type": "response.function_call_arguments.done", "item_id": item["id"],
                            "output_index": index, "arguments": item["arguments"]}]
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        events.append({"type": "response.completed", "response": response})
        return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def _encode(event: object) -> bytes:
    assert isinstance(event, dict)
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
