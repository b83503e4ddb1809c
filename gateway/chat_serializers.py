"""The chat completion request: its members, its messages and their content, and the checks across them.

Validation is strict about types: a JSON number is not a string and a string is
not a boolean, because a gateway that silently coerces hides client bugs and
forwards something the client did not mean. Every error names the member as a
dotted path (``messages.0.role``), and a top-level member the operation does not
know is a 400 ``unknown_parameter`` rather than something quietly dropped. The
strict fields and the strict base are utils_app.serializers, shared with the admin API.

Request serializers return only what the client sent plus the documented
defaults; ``validated()`` also returns ``sent``, the members the client named, so
the upstream receives exactly those and keeps its own defaults for the rest.

The OpenAPI schema of each request is exact: what it calls valid is accepted and
what it calls invalid is refused. Rules across members are stated with
``schema_rules`` (utils_app.schema) next to the code that enforces them; the
caps that come from settings (MAX_CHAT_N, MAX_CHAT_MESSAGES) are read once,
when the schema and the fields are built. The tools' members are gateway.tool_serializers.
"""
from typing import get_args

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail, ValidationError

from gateway.conversation_request import Effort
from gateway.json_schemas import check_chat_schemas
from gateway.tool_serializers import Tool, ToolCall, ToolChoice
from utils_app.errors import InvalidRequest
from utils_app.speed.validation import GivenFieldsOnly
from utils_app.serializers import (
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictFloatField,
    StrictIntegerField,
    StrictJsonObjectField,
    StrictListField,
    StrictSerializer,
    fail,
    optional,
)

MODEL_ID_MAX = 120
# "developer" is what OpenAI's newer models take in place of "system"; each provider type translates it.
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
# OpenAI's reasoning efforts, weakest first: the conversation's Effort, which says what each is worth to the
# upstreams that count a thinking budget in tokens.
EFFORTS = get_args(Effort)


def _anything_but(*values) -> dict:
    return {"not": {"enum": list(values)}}


CONTENT_PART = {
    "type": "object", "required": ["type"], "properties": {"type": {"type": "string"}},
    "anyOf": [{"properties": {"type": _anything_but("text")}},
              {"required": ["text"], "properties": {"text": {"type": "string"}}}],
}
CONTENT = {"oneOf": [{"type": "string"}, {"type": "array", "items": CONTENT_PART}]}


@extend_schema_field({**CONTENT, "nullable": True})
class MessageContent(serializers.Field):
    """A string, or an array of content parts (objects with a string ``type``)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, str):
            return data
        if not isinstance(data, list):
            fail("Must be a string or an array of content parts.")
        errors = {}
        for index, part in enumerate(data):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                errors[index] = {"type": [ErrorDetail("Each content part must be an object with a string 'type'.",
                                                      code="invalid")]}
            elif part["type"] == "text" and not isinstance(part.get("text"), str):
                errors[index] = {"text": [ErrorDetail("A text part needs a string 'text'.", code="invalid")]}
        if errors:
            raise ValidationError(errors)
        return data

    def to_representation(self, value):
        return value

    def quick_check(self):
        """A string is itself (utils_app.speed.validation.quick_check); an array of parts goes the whole way."""
        if type(self) is not MessageContent or self.validators:
            return None
        whole = self.run_validation

        def check(value):
            return value if type(value) is str else whole(value)
        return check


class ChatMessage(GivenFieldsOnly, serializers.Serializer):
    """One message. Members other than these are not forwarded (the SDK's message dumps carry extras).

    content may be null or left out only on an assistant message with tool_calls or a
    function_call; a tool message needs tool_call_id.
    """

    schema_rules = {"anyOf": [
        {"required": ["content"], "properties": {"role": {"enum": ["system", "developer", "user", "assistant"]},
                                                 "content": CONTENT}},
        {"required": ["content", "tool_call_id"], "properties": {
            "role": {"enum": ["tool"]}, "content": CONTENT, "tool_call_id": {"type": "string", "minLength": 1}}},
        {"required": ["tool_calls"], "properties": {"role": {"enum": ["assistant"]},
                                                    "tool_calls": {"type": "array", "minItems": 1}}},
        {"required": ["function_call"], "properties": {"role": {"enum": ["assistant"]},
                                                       "function_call": {"type": "object", "minProperties": 1}}},
    ]}

    role = StrictChoiceField(choices=CHAT_ROLES)
    content = MessageContent(required=False)
    name = optional(StrictCharField, max_length=256)
    tool_call_id = optional(StrictCharField, max_length=200)
    tool_calls = optional(StrictListField, child=ToolCall())
    function_call = optional(StrictJsonObjectField)

    def validate(self, attrs):
        role = attrs["role"]
        has_tool_calls = bool(attrs.get("tool_calls")) or bool(attrs.get("function_call"))
        if attrs.get("content") is None and not (role == "assistant" and has_tool_calls):
            raise ValidationError({"content": [ErrorDetail(
                "content is required (it may be null only on an assistant message with tool_calls).",
                code="required")]})
        if role == "tool" and not attrs.get("tool_call_id"):
            raise ValidationError({"tool_call_id": [ErrorDetail("A tool message needs tool_call_id.",
                                                                code="required")]})
        return {name: value for name, value in attrs.items() if value is not None or name == "content"}


@extend_schema_field({"oneOf": [{"type": "string"},
                                {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4}]})
class StopSequences(serializers.Field):
    def to_internal_value(self, data):
        if isinstance(data, str):
            return data
        if not isinstance(data, list) or not 1 <= len(data) <= 4 or not all(isinstance(s, str) for s in data):
            fail("Must be a string or an array of 1 to 4 strings.")
        return data

    def to_representation(self, value):
        return value


class StreamOptions(serializers.Serializer):
    include_usage = optional(StrictBooleanField)

    def to_internal_value(self, data):
        super().to_internal_value(data)
        return data


@extend_schema_field({"type": "object", "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}})
class LogitBias(serializers.Field):
    def to_internal_value(self, data):
        if not isinstance(data, dict):
            fail("Must be an object of token ids to numbers.")
        for token, bias in data.items():
            if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
                raise ValidationError({token: [ErrorDetail("Must be a number from -100 to 100.", code="invalid")]})
        return data

    def to_representation(self, value):
        return value


RESPONSE_FORMATS = ("text", "json_object", "json_schema")


@extend_schema_field({"type": "object", "required": ["type"], "oneOf": [
    {"properties": {"type": {"enum": ["text", "json_object"]}}},
    {"required": ["json_schema"], "properties": {"type": {"enum": ["json_schema"]}, "json_schema": {
        "type": "object", "properties": {"name": {"type": "string"}, "schema": {"type": "object", "nullable": True},
                                         "strict": {"type": "boolean", "nullable": True}}}}},
]})
class ResponseFormat(StrictJsonObjectField):
    """OpenAI's ``type`` (text, json_object, or json_schema with its ``json_schema`` object), passed on whole."""

    def to_internal_value(self, data):
        data = super().to_internal_value(data)
        if data.get("type") is None:
            raise ValidationError({"type": [ErrorDetail("A type is required.", code="required")]})
        if data["type"] not in RESPONSE_FORMATS:
            raise ValidationError({"type": [ErrorDetail(f"Must be one of {', '.join(RESPONSE_FORMATS)}.",
                                                        code="invalid")]})
        if data["type"] == "json_schema" and not isinstance(data.get("json_schema"), dict):
            raise ValidationError({"json_schema": [ErrorDetail("An object with the schema is required.",
                                                               code="required")]})
        return data


# OpenAPI 3.0 has no propertyNames: the names' length is said in words.
@extend_schema_field({"type": "object", "maxProperties": 16, "description": "At most 16 pairs; names of up to 64 "
                      "characters.", "additionalProperties": {"type": "string", "maxLength": 512}})
class ChatMetadata(serializers.Field):
    """OpenAI's metadata: at most 16 pairs of strings (keys of at most 64 characters, values of at most 512)."""

    def to_internal_value(self, data):
        if not isinstance(data, dict) or len(data) > 16:
            fail("Must be an object of at most 16 string values.")
        for name, value in data.items():
            if len(name) > 64 or not isinstance(value, str) or len(value) > 512:
                raise ValidationError({name: [ErrorDetail("Keys have at most 64 characters and values are strings "
                                                          "of at most 512.", code="invalid")]})
        return data

    def to_representation(self, value):
        return value


class ChatCompletionRequest(StrictSerializer):
    """The OpenAI chat parameters the gateway validates and forwards; any other member is refused
    with unknown_parameter, as OpenAI refuses it. stream_options only goes with stream: true. A
    deployment of another type than openai or azure translates what it can (reasoning_effort), and
    leaves out and names in X-Gateway-Ignored what it has no use for (docs/providers.md)."""

    schema_rules = {**StrictSerializer.schema_rules, "anyOf": [
        {"required": ["stream"], "properties": {"stream": {"enum": [True]}}},
        {"properties": {"stream_options": {"not": {"type": "object"}}}},  # so null or left out
    ]}

    model = StrictCharField(max_length=MODEL_ID_MAX)
    # Each message is work for the upstream and for the token estimate: a request carries at most MAX_CHAT_MESSAGES.
    messages = StrictListField(child=ChatMessage(), min_length=1, max_length=settings.MAX_CHAT_MESSAGES)
    stream = optional(StrictBooleanField, default=False)
    stream_options = optional(StreamOptions)
    temperature = optional(StrictFloatField, min_value=0, max_value=2)
    top_p = optional(StrictFloatField, min_value=0, max_value=1)
    max_tokens = optional(StrictIntegerField, min_value=1)
    max_completion_tokens = optional(StrictIntegerField, min_value=1)
    stop = optional(StopSequences)
    tools = optional(StrictListField, child=Tool(), max_length=128)
    tool_choice = optional(ToolChoice)
    response_format = optional(ResponseFormat)
    seed = optional(StrictIntegerField)
    user = optional(StrictCharField, max_length=256)
    # Each choice is a full completion the upstream bills: one request may ask for at most MAX_CHAT_N.
    n = optional(StrictIntegerField, min_value=1, max_value=settings.MAX_CHAT_N)
    presence_penalty = optional(StrictFloatField, min_value=-2, max_value=2)
    frequency_penalty = optional(StrictFloatField, min_value=-2, max_value=2)
    logit_bias = optional(LogitBias)
    logprobs = optional(StrictBooleanField)
    top_logprobs = optional(StrictIntegerField, min_value=0, max_value=20)
    parallel_tool_calls = optional(StrictBooleanField)
    # The members agent clients and the openai SDK send for OpenAI's own features: passed on unchanged to
    # openai and azure deployments, translated or left out and named by the others (gateway.upstream.base).
    reasoning_effort = optional(StrictChoiceField, choices=EFFORTS)
    verbosity = optional(StrictChoiceField, choices=("low", "medium", "high"))
    service_tier = optional(StrictCharField, max_length=40)
    metadata = optional(ChatMetadata)
    store = optional(StrictBooleanField)
    prompt_cache_key = optional(StrictCharField, max_length=1024)
    prompt_cache_options = optional(StrictJsonObjectField)
    prompt_cache_retention = optional(StrictCharField, max_length=40)
    safety_identifier = optional(StrictCharField, max_length=256)
    modalities = optional(StrictListField, child=StrictChoiceField(choices=("text", "audio")), max_length=2)
    audio = optional(StrictJsonObjectField)
    prediction = optional(StrictJsonObjectField)
    web_search_options = optional(StrictJsonObjectField)
    moderation = optional(StrictJsonObjectField)

    def validate(self, attrs):
        if attrs.get("stream_options") is not None and not attrs.get("stream"):
            raise ValidationError({"stream_options": [ErrorDetail("stream_options is only allowed with stream: true.",
                                                                  code="invalid")]})
        count_image_urls(attrs["messages"])
        if attrs.get("tools") or attrs.get("response_format"):
            check_chat_schemas(attrs)  # malformed or too large: a 400 before anything is charged or converted
        return attrs


def count_image_urls(messages: list) -> None:
    """At most MAX_CHAT_IMAGE_URLS image parts given by URL: each is fetched (by the gateway for some
    providers, by the upstream for others), so their number is bounded before the request is charged.
    Images sent inline (data URLs) are bounded by the request's size instead."""
    found = 0
    for index, message in enumerate(messages):
        content = message.get("content")
        if type(content) is not list:
            continue
        for position, part in enumerate(content):
            if part.get("type") != "image_url":
                continue
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if isinstance(url, str) and not url.startswith("data:"):
                found += 1
                if found > settings.MAX_CHAT_IMAGE_URLS:
                    raise InvalidRequest(
                        f"messages.{index}.content.{position}: a request may give at most "
                        f"{settings.MAX_CHAT_IMAGE_URLS} images by URL (MAX_CHAT_IMAGE_URLS); send the others "
                        f"inline as data URLs, or in another request.", param=f"messages.{index}.content.{position}")
