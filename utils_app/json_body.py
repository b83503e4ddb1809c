"""A request body read strictly as a JSON object: valid UTF-8, valid JSON, an object, no lone surrogate."""
import json
import math
import re
from collections.abc import Callable
from typing import Any

from utils_app.errors import InvalidRequest

# UTF-8 cannot carry a UTF-16 surrogate, so one can only arrive as a \uD800-\uDFFF escape.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


class _NotANumber(ValueError):
    pass


def _no_constant(name: str) -> float:
    raise _NotANumber(name)


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotANumber(text)
    return value


# Python's parser also reads NaN, Infinity and numbers past a double's range (1e999 as inf), which
# JSON has no room for: such a value could be neither stored (a JSON column refuses it) nor sent on.
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def parse_json_object(raw: bytes) -> dict:
    """Strictly parse a request body that must be a JSON object."""
    if not raw:
        raise InvalidRequest("The request body is empty; send a JSON object.", code="invalid_json")
    try:
        data = _DECODER.decode(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidRequest("The request body is not valid UTF-8.", code="invalid_json") from None
    except _NotANumber as error:
        raise InvalidRequest(f"The request body holds {str(error)[:20]}, which JSON cannot carry: it has no NaN, "
                             "no Infinity and no number beyond a double's range.", code="invalid_json") from None
    except RecursionError:
        # Python's parser descends one level per nested array or object: past a few hundred it stops,
        # whether or not the rest would parse. Saying "not valid JSON" would send the client looking
        # for a typo.
        raise InvalidRequest("The request body nests arrays or objects too deeply to be read: it may be valid "
                             "JSON, but this service reads JSON nested at most a few hundred levels deep.",
                             code="invalid_json") from None
    except ValueError:
        raise InvalidRequest("The request body is not valid JSON.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    if _SURROGATE_ESCAPE.search(raw) and any(_SURROGATE.search(text) for text in _strings(data)):
        # A lone surrogate is no character: it cannot be stored, sent upstream or even written
        # back in an error message as UTF-8. (A pair, such as an escaped emoji, parses into one.)
        raise InvalidRequest("The request body contains a lone UTF-16 surrogate escape (\\ud800-\\udfff), "
                             "which is not a character.", code="invalid_json")
    return data


def _strings(data):
    """Every string in parsed JSON, member names included (iteratively: bodies may nest deeply)."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)


def strings_mapped(value: Any, change: Callable[[str], str]) -> Any:
    """Parsed JSON with ``change`` applied to every string in it, member names included."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {change(name): strings_mapped(member, change) for name, member in value.items()}
    if isinstance(value, list):
        return [strings_mapped(member, change) for member in value]
    return value
