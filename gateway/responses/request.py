"""A Responses request checked (each member of the type OpenAI's API takes, before any charge) and its input
read as items; the helpers the codec's modules share."""
import uuid
from typing import Any

from utils_app.errors import InvalidRequest, UnsupportedParameter

FORMATS = ("text", "json_object", "json_schema")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def need(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise InvalidRequest(f"{where}: {message}", param=where)


def obj(value: Any) -> dict:
    """``value`` if it is a JSON object, else an empty one: what an optional object member reads as."""
    return value if isinstance(value, dict) else {}


def number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---------------------------------------------------------------- the request

def check_request(body: dict, *, counting: bool = False) -> None:
    """The request's own members, each of the type OpenAI's API takes (a 400 naming it, before any charge);
    ``background`` and ``conversation`` are refused: the gateway does not offer them (yet)."""
    need(isinstance(body.get("model"), str) and bool(body["model"]), "model", "is required (a chat model's id).")
    if body.get("background"):
        raise UnsupportedParameter("background: background responses are not offered by this gateway; send the "
                                   "request without it (stream it, if it is long).", param="background")
    if body.get("conversation") is not None:
        raise UnsupportedParameter("conversation: conversations are not offered by this gateway; chain responses "
                                   "with previous_response_id.", param="conversation")
    if body.get("input") is None:
        need(body.get("previous_response_id") is not None, "input", "Field required.")
    else:
        need(isinstance(body["input"], (str, list)), "input", "must be a string or an array of input items.")
        if isinstance(body["input"], list):
            for index, item in enumerate(body["input"]):
                need(isinstance(item, dict), f"input.{index}", "must be an input item object.")
    types = {"instructions": (str,), "tools": (list,), "tool_choice": (str, dict), "text": (dict,),
             "reasoning": (dict,), "metadata": (dict,), "include": (list,), "previous_response_id": (str,),
             "user": (str,), "parallel_tool_calls": (bool,), "stream": (bool,), "store": (bool,)}
    for name, kinds in types.items():
        value = body.get(name)
        if value is not None:
            need(isinstance(value, kinds), name, f"must be {' or '.join(_kind_name(kind) for kind in kinds)}.")
    # A count leaves out the limits on what is generated, not the tools and text format it reads.
    if not counting:
        if body.get("max_output_tokens") is not None:
            value = body["max_output_tokens"]
            need(type(value) is int and value >= 1, "max_output_tokens", "must be an integer of at least 1.")
        for name, most in (("temperature", 2), ("top_p", 1)):
            if body.get(name) is not None:
                need(number(body[name]) and 0 <= body[name] <= most, name, f"must be a number from 0 to {most}.")
    for index, tool in enumerate(body.get("tools") or ()):
        need(isinstance(tool, dict) and isinstance(tool.get("type"), str), f"tools.{index}",
              "must be a tool object with a type.")
    if not counting:
        metadata = body.get("metadata") or {}
        need(len(metadata) <= 16 and all(isinstance(value, str) and len(name) <= 64 and len(value) <= 512
                                          for name, value in metadata.items()),
              "metadata", "must be at most 16 string pairs (keys up to 64 characters, values up to 512).")
    text_format = (body.get("text") or {}).get("format")
    if text_format is not None:
        need(isinstance(text_format, dict) and text_format.get("type") in FORMATS, "text.format.type",
              f"must be one of {', '.join(FORMATS)}.")
        if text_format["type"] == "json_schema":
            need(isinstance(text_format.get("schema"), dict), "text.format.schema", "must be a JSON schema object.")
            need(isinstance(text_format.get("name"), str) and bool(text_format["name"]), "text.format.name",
                  "is required.")


def _kind_name(kind: type) -> str:
    return {str: "a string", list: "an array", dict: "an object", bool: "a boolean"}[kind]


def input_items(body: dict) -> list[dict]:
    """The request's input as items: a string is one user message; a message item may leave out its type."""
    value = body.get("input")
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    return [{"type": "message", **item} if item.get("type") is None and "role" in item else item for item in value]
