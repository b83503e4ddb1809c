"""How a Responses request reaches a deployment: passed through to one that speaks the Responses API,
translated into a chat request for any other; the answer as a response object, kept when ``store`` asks."""
from typing import Any

from gateway import metering
from gateway.chat_serializers import ChatCompletionRequest
from gateway.conversation import Choice, PassedThrough, Usage
from gateway.models import StoredResponse
from gateway.pipeline import Meter
from gateway.responses.answer import (
    call_item,
    message_item,
    origin,
    response_object,
    wrap,
)
from gateway.responses.chat_request import chat_params
from gateway.responses.request import new_id, obj
from gateway.responses.store import conversation, storable_json
from gateway.responses.stream import ResponsesEvents
from gateway.services import ChatDialect
from gateway.upstream.openai import incomplete_reason, response_usage
from keys.models import ApiKey
from utils_app import clock

TABLE = StoredResponse._meta.db_table


class ResponsesDialect(ChatDialect):
    """A Responses request: passed through to deployments that speak the Responses API, translated for any
    other; the answer is the response object or the Responses event stream either way, and with ``store``
    the settlement keeps it (``kept``)."""

    records_as = "responses"

    def __init__(self, body: dict, stored: StoredResponse | None, *, key: ApiKey):
        self.body = body
        self.key = key
        self.store = body.get("store") is not False
        self.items = conversation(stored, body)
        self.ignored: list[str] = []  # what a translated attempt leaves out (the same for every such attempt)
        params, self.customs = chat_params(body, self.items, self.ignored)
        self.params, _ = ChatCompletionRequest.with_data(params).validated()
        self.response_id = new_id("resp")
        self.created_at = int(clock.now())
        self.model = body["model"]
        self.deployment: int | None = None  # the one that answered
        self.final: dict | None = None  # the response object the client got, for the store
        self.wants_encrypted = "reasoning.encrypted_content" in (body.get("include") or ())

    # -- the attempts

    def admitted(self, meter: Meter) -> None:
        """Encrypted reasoning in the conversation goes back to the deployment that made it, while it is
        available: the newest such item names it."""
        for item in reversed(self.items):
            if item.get("type") == "reasoning" and origin(item.get("encrypted_content")) is not None:
                meter.attempts.prefer(origin(item["encrypted_content"]))
                return

    @staticmethod
    def native(client: Any) -> bool:
        return bool(getattr(client, "speaks_responses", False))

    def complete(self, client: Any, payload: dict) -> dict:
        self.deployment = client.deployment.pk
        if self.native(client):
            return client.responses(self.upstream_body(client.deployment.pk))
        client.ignored.extend(self.ignored + self._translated_extras(client, payload))
        return client.chat(payload)

    def stream(self, client: Any, payload: dict) -> Any:
        self.deployment = client.deployment.pk
        if self.native(client):
            return client.responses_stream(self.upstream_body(client.deployment.pk))
        client.ignored.extend(self.ignored + self._translated_extras(client, payload))
        return client.chat_stream(payload)

    def _translated_extras(self, client: Any, payload: dict) -> list[str]:
        """reasoning.effort is chat's reasoning_effort for an OpenAI-compatible upstream; any other leaves
        it out (named). Gemini cannot be kept from parallel calls: its parallel_tool_calls is left out too."""
        extras = []
        effort = (self.body.get("reasoning") or {}).get("effort")
        payload.pop("reasoning_effort", None)
        if effort is not None:
            if client.deployment.provider.type in ("openai", "azure"):
                payload["reasoning_effort"] = effort
            else:
                extras.append("reasoning.effort")
        if client.deployment.provider.type == "gemini" and "parallel_tool_calls" in payload:
            payload.pop("parallel_tool_calls")
            extras.append("parallel_tool_calls")
        return extras

    def upstream_body(self, deployment: int) -> dict:
        """The request as the client sent it, its conversation rebuilt from the store, and the encrypted
        reasoning this deployment can read (no other). Items go without ids (the gateway's own mean nothing
        upstream), but for reasoning items, whose ids are the upstream's and which its API requires."""
        # include and stream_options go on as they came: they ask for what the upstream adds to its answer.
        body = {name: value for name, value in self.body.items() if name not in ("store", "previous_response_id")}
        items = []
        for item in self.items:
            if item.get("type") != "reasoning":
                item = {name: value for name, value in item.items() if name != "id"}
            else:
                content = item.get("encrypted_content")
                made_by = origin(content)
                if made_by is not None and made_by != deployment or made_by is None and content is None:
                    continue  # another account's reasoning, or none to send back: the turn goes on without it
                if made_by is not None:
                    item = {**item, "encrypted_content": str(content).split(".", 2)[2]}  # the upstream's own text
            items.append(item)
        body["input"] = items
        return body

    # -- the answer

    def client_response(self, response: dict) -> dict:
        """An upstream's response object as the client gets it: the gateway's id, the client's model name and
        settings, encrypted reasoning wrapped (or left out unless asked for)."""
        found = response.get("output")
        output = [self.client_item(item) for item in (found if isinstance(found, list) else ()) if isinstance(item, dict)]
        return {**response, "id": self.response_id, "model": self.model, "output": output, "store": self.store,
                "previous_response_id": self.body.get("previous_response_id"),
                "metadata": self.body.get("metadata") or response.get("metadata") or {}}

    def client_item(self, item: dict) -> dict:
        if item.get("type") == "reasoning" and "encrypted_content" in item:
            if not self.wants_encrypted:
                return {name: value for name, value in item.items() if name != "encrypted_content"}
            return {**item, "encrypted_content": wrap(item["encrypted_content"], self.deployment)}
        return item

    def answer(self, completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
        usage = response_usage(Usage(input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached,
                                     reasoning_tokens=Usage.from_chat(completion.get("usage")).reasoning_tokens))
        if "cost" in obj(completion.get("usage")):  # the credits charged (CONTRACT section 12)
            usage["cost"] = completion["usage"]["cost"]
        if isinstance(completion, PassedThrough):
            response = self.client_response(completion.native)
            self.final = {**response, "usage": usage}
            return self.final
        choice = (Choice.all_of(completion) or [Choice()])[0]
        output = [message_item(choice.text)] if choice.text else []
        output += [call_item(call, self.customs) for call in choice.tool_calls]
        reason = incomplete_reason(choice.finish)
        self.final = response_object(self.body, response_id=self.response_id, created_at=self.created_at,
                                     model=self.model, output=output, status="incomplete" if reason else "completed",
                                     usage=usage, reason=reason)
        return self.final

    def events(self) -> "ResponsesEvents":
        return ResponsesEvents(self)

    def kept(self) -> metering.Also | None:
        """The stored response, written by the settlement statement (with store true)."""
        if not self.store or self.final is None:
            return None
        return metering.Also(
            postgres=(f"INSERT INTO {TABLE} (id, key_id, response, input_items, created_at, request_id) SELECT "
                      f"%(stored_id)s, key_id, %(stored_response)s::jsonb, %(stored_items)s::jsonb, %(now)s, "
                      f"request_id FROM settled"),
            sqlite=(f"INSERT INTO {TABLE} (id, key_id, response, input_items, created_at, request_id) VALUES "
                    f"(%(stored_id)s, %(key_id)s, %(stored_response)s, %(stored_items)s, %(now)s, %(request_id)s)"),
            params={"stored_id": self.response_id, "stored_response": storable_json(self.final),
                    "stored_items": storable_json(self.items)})
