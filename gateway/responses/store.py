"""The conversation the gateway keeps: a follow-up's stored response, the items a response was made from,
and the page of them GET /v1/responses/{id}/input_items lists."""
import json
from typing import Any

from django.db.models import QuerySet

from gateway.models import StoredResponse
from gateway.responses.request import input_items, need, new_id
from keys.models import ApiKey
from utils_app.errors import NotFound
from utils_app.json_body import strings_mapped


def storable_json(value: Any) -> str:
    """``value`` as the JSON text a stored response keeps: as it is, but for a NUL in a string, which
    PostgreSQL's jsonb refuses and is kept as U+FFFD (the client had the answer as it came). A lone surrogate,
    the other character no JSON column holds, never gets this far: a client's body refuses one
    (utils_app.json_body), an upstream's answer reads it as U+FFFD (utils_app.http.json_object)."""
    text = json.dumps(value, ensure_ascii=False)
    if "\\u0000" not in text:  # json.dumps writes a NUL as this escape
        return text
    return json.dumps(strings_mapped(value, lambda part: part.replace("\x00", "\ufffd")), ensure_ascii=False)


def previous(key: ApiKey, response_id: str | None) -> StoredResponse | None:
    """The stored response a follow-up continues (one read); unknown, another key's, deleted or never stored
    is a 404 response_not_found, before anything is charged."""
    if response_id is None:
        return None
    found = stored_of(key, response_id).first()
    if found is None:
        raise not_found(response_id, param="previous_response_id")
    return found


def stored_of(key: ApiKey, response_id: str) -> QuerySet[StoredResponse]:
    """The key's stored response of this id, as a query: empty for an id no stored response can have."""
    # PostgreSQL's text cannot hold a NUL, so no stored id has one, and asking it for one is a database error.
    if "\x00" in response_id:
        return StoredResponse.objects.none()
    return StoredResponse.objects.filter(pk=response_id, key=key)


def not_found(response_id: str, *, param: str | None = None) -> NotFound:
    return NotFound(f"No response with id '{response_id}' is stored for this key (it may have been deleted, have "
                    f"expired, or have been made with store: false).", code="response_not_found", param=param)


def conversation(stored: StoredResponse | None, body: dict) -> list[dict]:
    """Every item of the conversation so far: the previous response's input and output, then this request's
    input, each with an id (what GET /v1/responses/{id}/input_items lists)."""
    items = list(stored.input_items) + list(stored.response.get("output") or ()) if stored is not None else []
    known = {item["id"]: item for item in items if isinstance(item.get("id"), str)}
    for item in input_items(body):
        if item.get("type") == "item_reference":
            # An item of an earlier turn, by its id: what it names, where the store has it; else it is left out.
            found = known.get(str(item.get("id")))
            if found is not None:
                items.append(found)
            continue
        items.append(item if isinstance(item.get("id"), str) else {"id": new_id(_id_prefix(item)), **item})
    return items


def _id_prefix(item: dict) -> str:
    return {"message": "msg", "function_call": "fc", "function_call_output": "fco", "custom_tool_call": "ctc",
            "custom_tool_call_output": "ctco", "reasoning": "rs"}.get(str(item.get("type")), "item")


def input_items_page(stored: StoredResponse, *, limit: Any, order: Any, after: Any) -> dict:
    """GET /v1/responses/{id}/input_items: a page of the items the response was made from."""
    try:
        size = int(limit) if limit is not None else 20
    except ValueError:
        size = 0
    need(1 <= size <= 100, "limit", "must be an integer from 1 to 100.")
    order = order or "desc"
    need(order in ("asc", "desc"), "order", "must be 'asc' or 'desc'.")
    items = list(stored.input_items) if order == "asc" else list(reversed(stored.input_items))
    if after:
        ids = [item.get("id") for item in items]
        need(after in ids, "after", "must be the id of one of the response's input items.")
        items = items[ids.index(after) + 1:]
    page = items[:size]
    return {"object": "list", "data": page, "first_id": page[0].get("id") if page else None,
            "last_id": page[-1].get("id") if page else None, "has_more": len(items) > size}
