"""HTTP views of OpenAI's Responses API (CONTRACT section 9): parse, call gateway.responses, answer.

``POST /v1/responses`` is a metered operation like chat (gateway.views.MeteredView); the stored responses,
``input_items`` and ``input_tokens`` are free, but count against the key's rpm and rph like any request.
"""
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework.response import Response

from gateway import services
from gateway.responses.chat_request import input_tokens
from gateway.responses.dialect import ResponsesDialect
from gateway.responses.request import check_request
from gateway.responses.store import input_items_page, not_found, previous, stored_of
from gateway.models import StoredResponse
from gateway.views import ERRORS, METERED_HEADERS, KeyLimitedView, MeteredView, body_example
from utils_app.error_handler import json_error
from utils_app.errors import ClientError, GatewayError, InvalidRequest, NotFound
from utils_app.json_body import parse_json_object
from utils_app.schema import error_responses

RESPONSES_REQUEST = {
    "type": "object", "required": ["model"],
    "description": "OpenAI's Responses request. Members not listed reach deployments that speak the Responses API "
                   "as they are, and are left out (named in X-Gateway-Ignored) towards the others.",
    "properties": {
        "model": {"type": "string", "description": "A chat model's id (GET /v1/models)."},
        "input": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]},
        "instructions": {"type": "string", "nullable": True},
        "tools": {"type": "array", "nullable": True, "items": {"type": "object"}},
        "tool_choice": {"nullable": True, "oneOf": [{"type": "string"}, {"type": "object"}]},
        "text": {"type": "object", "nullable": True},
        "reasoning": {"type": "object", "nullable": True},
        "max_output_tokens": {"type": "integer", "minimum": 1, "nullable": True},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2, "nullable": True},
        "top_p": {"type": "number", "minimum": 0, "maximum": 1, "nullable": True},
        "stream": {"type": "boolean", "nullable": True},
        "store": {"type": "boolean", "nullable": True, "description": "Kept by the gateway (default true)."},
        "previous_response_id": {"type": "string", "nullable": True},
        "metadata": {"type": "object", "nullable": True},
    },
}
FREE_ERRORS = error_responses(400, 401, 403, 404, 429, 500, 503)


class WebSocketRefused(ClientError):
    """Codex dials a WebSocket first and goes on over HTTP on this answer alone (any other makes it fail)."""

    def __init__(self) -> None:
        super().__init__("This gateway serves the Responses API over HTTP only; send the request as a POST.",
                         status=426, code="websocket_not_supported")


def wants_websocket(request) -> bool:
    return request.method == "GET" and "websocket" in request.META.get("HTTP_UPGRADE", "").lower()


@extend_schema_view(post=extend_schema(
    operation_id="create_response", tags=["models"],
    summary="OpenAI Responses API (optionally streamed as server-sent events)",
    description="OpenAI's Responses request and answer, served by every chat model and metered exactly like a chat "
                "completion (costs the model's `cost`; operation `responses` on the ledger and usage rows). With "
                "`store` (default true) the gateway keeps the response for `previous_response_id` and "
                "`GET /v1/responses/{id}`. With `stream: true` the answer is the Responses event stream "
                "(`response.created` … `response.completed`). A `GET` asking for a WebSocket is answered 426. "
                + METERED_HEADERS,
    request={"application/json": RESPONSES_REQUEST},
    examples=body_example(model="local-chat", input="Hello!"),
    responses={(200, "application/json"): OpenApiTypes.OBJECT, (200, "text/event-stream"): OpenApiTypes.STR,
               **ERRORS},
))
class ResponsesView(MeteredView):
    """POST /v1/responses through the chat pipeline with the Responses dialect (gateway.responses)."""

    def initial(self, request, *args, **kwargs):
        if wants_websocket(request):
            raise WebSocketRefused()  # before the key is looked at: Codex must learn it over HTTP whatever follows
        super().initial(request, *args, **kwargs)

    def validate(self, body):
        check_request(body)
        return body, set(body)

    def operate(self, request, params, sent):
        # The store's one read for a follow-up, before anything is charged: an unknown id costs nothing.
        stored = previous(request.user, params.get("previous_response_id"))
        dialect = ResponsesDialect(params, stored, key=request.user)
        return services.chat_completion(request=request, key=request.user, params=dialect.params, dialect=dialect)


def _stored(request, response_id: str) -> StoredResponse:
    found = stored_of(request.user, response_id).first()
    if found is None:
        raise not_found(response_id)
    return found


@extend_schema_view(
    get=extend_schema(operation_id="get_response", tags=["models"], summary="A stored response",
                      description="The response object as it was answered; for the key that made it only. "
                                  "`stream=true` (OpenAI's replay of a response's events) is a 400: a stored "
                                  "response is answered whole.",
                      parameters=[OpenApiParameter("stream", str, enum=["false"], required=False)],
                      responses={200: OpenApiTypes.OBJECT, **FREE_ERRORS}),
    delete=extend_schema(operation_id="delete_response", tags=["models"], summary="Delete a stored response",
                         responses={200: OpenApiTypes.OBJECT, **FREE_ERRORS}),
)
class ResponseView(KeyLimitedView):
    def get(self, request, response_id: str):
        if request.query_params.get("stream", "false") != "false":
            # The gateway keeps a response, not the events it was streamed as: a client that asks for them
            # would read a JSON object as an event stream.
            raise InvalidRequest("stream: a stored response is answered whole, as one JSON object; this "
                                 "gateway does not replay its events.", param="stream")
        return Response(_stored(request, response_id).response)

    def delete(self, request, response_id: str):
        deleted, _ = stored_of(request.user, response_id).delete()
        if not deleted:
            raise not_found(response_id)
        return Response({"id": response_id, "object": "response.deleted", "deleted": True})


@extend_schema_view(get=extend_schema(
    operation_id="list_response_input_items", tags=["models"], summary="The input items of a stored response",
    description="The items the response was made from (a previous response's included), newest first unless "
                "`order=asc`.",
    parameters=[OpenApiParameter("limit", int, description="1 to 100 (default 20)."),
                OpenApiParameter("order", str, enum=["asc", "desc"], description="Default desc."),
                OpenApiParameter("after", str, description="An item id: the page starts after it.")],
    responses={200: OpenApiTypes.OBJECT, **FREE_ERRORS},
))
class ResponseInputItemsView(KeyLimitedView):
    def get(self, request, response_id: str):
        stored = _stored(request, response_id)
        query = request.query_params
        return Response(input_items_page(stored, limit=query.get("limit"), order=query.get("order"),
                                                   after=query.get("after")))


@extend_schema_view(post=extend_schema(
    operation_id="count_response_input_tokens", tags=["models"], summary="Responses API: count input tokens",
    description="`{\"object\": \"response.input_tokens\", \"input_tokens\": N}` from the gateway's own estimate of "
                "the request's input; free of charge, counted against rpm and rph.",
    request={"application/json": RESPONSES_REQUEST}, examples=body_example(model="local-chat", input="Hello!"),
    responses={200: OpenApiTypes.OBJECT, **FREE_ERRORS},
))
class ResponseInputTokensView(KeyLimitedView):
    def post(self, request):
        body = parse_json_object(request.body)
        if isinstance(body, GatewayError):
            raise body
        return Response({"object": "response.input_tokens",
                         "input_tokens": input_tokens(key=request.user, body=body)})


@csrf_exempt
def compact_not_served(request):
    """POST /v1/responses/compact, OpenAI's compaction of a conversation into an item only its maker can read:
    Codex calls it when its provider is its built-in OpenAI one pointed at the gateway. Not served (a 404 that
    says how to go on), rather than read as the stored response called "compact" (a 405 to a POST)."""
    return json_error(NotFound("The Responses API's compact endpoint is not served by this gateway: a client "
                               "compacts its conversation itself through /v1/responses (with Codex, declare the "
                               "gateway as a model provider of its own, not as the OpenAI provider's base URL).",
                               code="compact_not_supported"))
