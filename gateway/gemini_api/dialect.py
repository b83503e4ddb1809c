"""How a GenerateContentRequest reaches a deployment: passed through to a gemini one, translated for any other."""
from gateway.conversation import PassedThrough
from gateway.gemini_api.answer import generate_response
from gateway.gemini_api.members import GeminiRequest
from gateway.gemini_api.stream import GeminiEvents
from gateway.services import ChatDialect
from gateway.upstream.gemini import GeminiAdapter
from gateway.upstream.gemini_native import generate_native, stream_native
from utils_app.errors import UnsupportedParameter


class GeminiDialect(ChatDialect):
    """A GenerateContentRequest (``body``, as the client sent it): passed through to a gemini deployment,
    translated for any other; the answer in Google's shapes either way."""

    records_as = "gemini"

    def __init__(self, body: dict, request: GeminiRequest, *, sse: bool):
        self.body = body
        self.request = request
        self.sse = sse

    @staticmethod
    def native(client) -> bool:
        return isinstance(client, GeminiAdapter)

    def translated(self, client) -> None:
        """A deployment of another type: what only Google's API takes moves the request on to the pool's next
        deployment (a 400 naming it when none is left); what it can do without is left out and named."""
        for name, why in self.request.native_only.items():
            raise UnsupportedParameter(f"{name}: {why}", param=name)
        client.ignored.extend(self.request.ignored)

    def complete(self, client, payload: dict) -> dict:
        if self.native(client):
            return generate_native(client, self.body)
        self.translated(client)
        return client.chat(payload)

    def stream(self, client, payload: dict):
        if self.native(client):
            return stream_native(client, self.body)
        self.translated(client)
        return client.chat_stream(payload)

    def answer(self, completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
        if isinstance(completion, PassedThrough):  # Google's own answer, under the model's name as the client named it
            answer = completion.native
            return {**answer, "modelVersion": completion.get("model")} if "modelVersion" in answer else answer
        return generate_response(completion, input_tokens=input_tokens, output_tokens=output_tokens, cached=cached)

    def events(self) -> "GeminiEvents":
        return GeminiEvents(sse=self.sse)
