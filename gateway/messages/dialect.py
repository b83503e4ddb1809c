"""How a Messages request reaches a deployment: passed through as it came to an anthropic one, translated
for any other (what the translation left out named, what it cannot honour refused before the charge)."""
import json

from gateway.tokens import count_tokens
from gateway.messages.answer import message_object
from gateway.messages.stream import AnthropicEvents
from gateway.messages.translation import Translation
from gateway.services import ChatDialect
from gateway.upstream import base
from gateway.upstream.shapes import prompt_text
from models_catalog.served import ServedModel


def refuse_before_charge(model: ServedModel, params: dict, translation: Translation) -> None:
    """Refuse, before any credit is taken, a request no deployment of the model's pool can serve: an anthropic
    deployment takes the request as it came; the others take the translation (gateway.upstream.base)."""
    if translation.refusal is not None and not any(d.provider.type == "anthropic" for d in model.pool):
        raise translation.refusal
    base.refuse_before_charge(model, params, passed_through=("anthropic",))


class AnthropicDialect(ChatDialect):
    """A Messages request (``body``, as the client sent it): passed through as it is to an anthropic
    deployment, translated for any other (``params``, with what the translation left out in
    ``translation``); the answer in Anthropic's shapes either way."""

    def __init__(self, body: dict | None = None, *, beta: str = "", params: dict | None = None,
                 translation: Translation | None = None):
        self.body = body or {}
        self.params = params or {}
        self.translation = translation or Translation()
        # The client's anthropic-beta header goes with the request it concerns, to anthropic deployments.
        self.headers = {"anthropic-beta": beta} if beta else {}

    def complete(self, client, payload: dict) -> dict:
        if getattr(client, "passes_through", False):
            return client.messages(self.body, headers=self.headers)
        self.name_left_out(client)
        try:
            return client.chat(payload)
        finally:
            self.rename(client)

    def stream(self, client, payload: dict):
        if getattr(client, "passes_through", False):
            return client.messages_stream(self.body, headers=self.headers)
        self.name_left_out(client)
        try:
            return client.chat_stream(payload)
        finally:
            self.rename(client)

    def name_left_out(self, client) -> None:
        """A deployment of another type gets the translation: what only Anthropic's API honours was left out
        of it, and the attempt names it (X-Gateway-Ignored), the beta header included. What nothing can stand
        in for is refused: the request moves on to the pool's next deployment."""
        if self.translation.refusal is not None:
            raise self.translation.refusal
        client.ignored[:0] = [*self.translation.dropped, *(["anthropic-beta"] if self.headers else [])]

    def rename(self, client) -> None:
        """What the adapter left out of the translation, by the client's own member: the upstream that cannot
        think was asked through thinking (or output_config.effort), not reasoning_effort."""
        words = {"reasoning_effort": self.translation.reasoning_from or "thinking",
                 "parallel_tool_calls": "tool_choice.disable_parallel_tool_use"}
        client.ignored[:] = [words.get(name, name) for name in client.ignored]

    def input_tokens(self) -> int:
        """The gateway's own count of the request's input (as services.estimate_chat_tokens counts it)."""
        messages, tools = self.params.get("messages") or [], self.params.get("tools")
        return count_tokens(prompt_text(messages)) + (count_tokens(json.dumps(tools)) if tools else 0)

    def answer(self, completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
        """The answer in Anthropic's shapes (gateway.messages.answer)."""
        return message_object(completion, input_tokens=input_tokens, output_tokens=output_tokens, cached=cached)

    def events(self) -> "AnthropicEvents":
        return AnthropicEvents(input_tokens=self.input_tokens)
