"""The chat request's tools: the tools offered, the tool the model must call, and the calls an assistant made."""
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail, ValidationError

from utils_app.serializers import StrictCharField, StrictJsonObjectField, fail, optional
from utils_app.speed.validation import Unsure, quick_check


class ToolCall(serializers.Serializer):
    id = StrictCharField(max_length=200)
    type = StrictCharField(max_length=40)
    function = StrictJsonObjectField()

    def to_internal_value(self, data):
        validated = super().to_internal_value(data)
        # Passed on whole: the upstream may know members this gateway does not.
        return data if isinstance(data, dict) else validated

    def quick_check(self):
        """A call that is valid, checked without DRF's walk over its three fields (utils_app.speed.validation): that
        walk cost some 60 µs a call, so a body of many small calls (a Gemini functionCall part is 40 bytes) cost
        six times a plain one of its size. Anything the fields' own quick checks cannot vouch for goes DRF's way."""
        if type(self) is not ToolCall or self.validators:
            return None
        check_id, check_type = quick_check(self.fields["id"]), quick_check(self.fields["type"])

        def check(data):
            if type(data) is not dict or type(data.get("function")) is not dict or "id" not in data or "type" not in data:
                raise Unsure
            check_id(data["id"])
            check_type(data["type"])
            return data
        return check


class Tool(serializers.Serializer):
    """A tool; one of type "function" needs a function with a non-empty string name."""

    schema_rules = {"anyOf": [
        {"properties": {"type": {"not": {"enum": ["function"]}}}},
        {"required": ["function"], "properties": {"function": {
            "type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1},
                                                                   "parameters": {"type": "object",
                                                                                  "nullable": True}}}}},
    ]}

    type = StrictCharField(max_length=40)
    function = optional(StrictJsonObjectField)

    def to_internal_value(self, data):
        attrs = super().to_internal_value(data)
        function = attrs.get("function")
        if attrs["type"] == "function":
            if function is None:
                raise ValidationError({"function": [ErrorDetail("A function tool needs 'function'.", code="required")]})
            if not isinstance(function.get("name"), str) or not function["name"]:
                raise ValidationError({"function": {"name": [ErrorDetail("Must be a non-empty string.",
                                                                         code="required")]}})
        return data


_NAMED = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}}


@extend_schema_field({"oneOf": [
    {"type": "string", "enum": ["none", "auto", "required"]},
    {"type": "object", "required": ["type", "function"],
     "properties": {"type": {"enum": ["function"]}, "function": _NAMED}},
    {"type": "object", "required": ["type", "custom"], "properties": {"type": {"enum": ["custom"]}, "custom": _NAMED}},
    {"type": "object", "required": ["type", "allowed_tools"], "properties": {
        "type": {"enum": ["allowed_tools"]},
        "allowed_tools": {"type": "object", "required": ["mode", "tools"], "properties": {
            "mode": {"enum": ["auto", "required"]}, "tools": {"type": "array", "items": {"type": "object"}}}}}},
]})
class ToolChoice(serializers.Field):
    """OpenAI's tool_choice: a word, or an object forcing one function or custom tool, or narrowing the
    tools the model may call (allowed_tools). Whether a named tool is among the request's is the
    deployment's to judge (the upstream's, or local-chat's)."""

    def to_internal_value(self, data):
        if data in ("none", "auto", "required"):
            return data
        if not isinstance(data, dict):
            fail("Must be 'none', 'auto', 'required' or an object naming a tool.")
        kind = data.get("type")
        if kind in ("function", "custom"):
            named = data.get(kind)
            if not isinstance(named, dict) or not isinstance(named.get("name"), str) or not named["name"]:
                raise ValidationError({kind: {"name": [ErrorDetail("Must be a non-empty string.", code="required")]}})
        elif kind == "allowed_tools":
            allowed = data.get("allowed_tools")
            if not isinstance(allowed, dict) or allowed.get("mode") not in ("auto", "required") \
                    or not isinstance(allowed.get("tools"), list) \
                    or not all(isinstance(tool, dict) for tool in allowed["tools"]):
                raise ValidationError({"allowed_tools": [ErrorDetail(
                    "Must be an object with mode 'auto' or 'required' and a list of tool objects.", code="invalid")]})
        else:
            raise ValidationError({"type": [ErrorDetail("Must be 'function', 'custom' or 'allowed_tools'.",
                                                        code="required" if kind is None else "invalid")]})
        return data

    def to_representation(self, value):
        return value
