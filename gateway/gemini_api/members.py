"""Reading Google's members (camelCase or snake_case, as its API takes them) with the 400 that names one that
is not what it should be, and ``GeminiRequest``, what decoding a request makes."""
import re
from dataclasses import dataclass, field
from typing import Any

from utils_app.errors import InvalidRequest

_CAMEL_HUMP = re.compile(r"(?<!^)(?=[A-Z])")


def member(body: dict, name: str) -> Any:
    """A member by its camelCase name, or by its snake_case one (Google's API takes both)."""
    if name in body:
        return body[name]
    return body.get(_CAMEL_HUMP.sub("_", name).lower())


def camel(name: str) -> str:
    """A member's name as Google writes it in its documentation (camelCase), for the names the gateway reports."""
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def obj(value: Any) -> dict:
    """An upstream's member that should be an object, or an empty one: what a malformed answer reads as."""
    return value if isinstance(value, dict) else {}


def need(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise InvalidRequest(f"{where}: {message}", param=where)


def need_dict(value: Any, where: str) -> dict:
    need(isinstance(value, dict), where, "must be an object.")
    return value


def need_list(value: Any, where: str) -> list:
    need(isinstance(value, list), where, "must be an array.")
    return value


@dataclass
class GeminiRequest:
    """A GenerateContentRequest decoded: the chat parameters, what a translated deployment leaves out and
    names (``ignored``), and what only a gemini deployment can honour, each with why (``native_only``)."""

    params: dict
    ignored: list[str] = field(default_factory=list)
    native_only: dict[str, str] = field(default_factory=dict)
