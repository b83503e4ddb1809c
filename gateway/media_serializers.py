"""The image, speech and embedding requests, strict as the chat request is (gateway.chat_serializers), and
the defaults the upstream adapters fill in for members the client left out.

The cap that comes from settings (MAX_EMBEDDING_INPUTS) is read once, when the schema and the fields are built.
"""
import re
from typing import cast

from django.conf import settings
from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail, ValidationError

from gateway.chat_serializers import MODEL_ID_MAX
from gateway.local_media import MAX_EMBEDDING_DIMENSIONS
from utils_app.serializers import (
    StrictCharField,
    StrictChoiceField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
    fail,
    optional,
)

IMAGE_QUALITIES = ("standard", "hd", "ultra_hd", "clarity")
IMAGE_FORMATS = ("url", "b64_json")
IMAGE_STYLES = ("vivid", "natural")
IMAGE_SIDE = (64, 4096)
# WIDTHxHEIGHT, each side 64 to 4096 in ASCII digits (leading zeros allowed, as int() reads them).
# \Z, not $: Python's $ would also accept a trailing newline. drf-spectacular writes \Z as $.
_IMAGE_SIDE_RE = r"0*(6[4-9]|[7-9][0-9]|[1-9][0-9]{2}|[1-3][0-9]{3}|40[0-8][0-9]|409[0-6])"
IMAGE_SIZE_RE = re.compile(rf"^{_IMAGE_SIDE_RE}x{_IMAGE_SIDE_RE}\Z")
IMAGE_DEFAULTS = {"n": 1, "size": "1024x1024", "quality": "standard", "response_format": "url", "style": "vivid"}
SPEECH_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
SPEECH_DEFAULTS = {"response_format": "mp3", "speed": 1.0}
SPEECH_SPEED = (0.25, 4.0)
SPEECH_INPUT_MAX = 4096
EMBEDDING_FORMATS = ("float", "base64")


# ---------------------------------------------------------------- images

class ImageGenerationRequest(StrictSerializer):
    """Image generation; any member not listed is refused with unknown_parameter."""

    model = StrictCharField(max_length=MODEL_ID_MAX)
    prompt = StrictCharField(max_length=32000)
    n = optional(StrictIntegerField, min_value=1, max_value=10, default=IMAGE_DEFAULTS["n"])
    size = optional(StrictCharField, max_length=20, default=IMAGE_DEFAULTS["size"], validators=[RegexValidator(
        IMAGE_SIZE_RE, message=f"Must look like WIDTHxHEIGHT, e.g. 1024x1024, each side from {IMAGE_SIDE[0]} to "
                               f"{IMAGE_SIDE[1]} pixels.")])
    quality = optional(StrictChoiceField, choices=IMAGE_QUALITIES, default=IMAGE_DEFAULTS["quality"])
    response_format = optional(StrictChoiceField, choices=IMAGE_FORMATS, default=IMAGE_DEFAULTS["response_format"])
    style = optional(StrictChoiceField, choices=IMAGE_STYLES, default=IMAGE_DEFAULTS["style"])
    user = optional(StrictCharField, max_length=256)

    def to_internal_value(self, data):
        # Defaults of optional members apply when they are absent or null.
        return {**IMAGE_DEFAULTS, **super().to_internal_value(data)}


def image_dimensions(size: str) -> tuple[int, int]:
    # ``size`` has passed the request's validation, which IMAGE_SIZE_RE is part of.
    width, height = cast(re.Match[str], IMAGE_SIZE_RE.match(size)).groups()
    return int(width), int(height)


# ---------------------------------------------------------------- speech

@extend_schema_field({"oneOf": [
    {"type": "string", "minLength": 1, "maxLength": 64},
    {"type": "object", "required": ["id"], "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 200}}},
]})
class Voice(serializers.Field):
    """A voice name, or ``{"id": ...}`` for a custom voice (as the OpenAI SDK allows)."""

    def to_internal_value(self, data):
        if isinstance(data, str) and 1 <= len(data) <= 64:
            return data
        if isinstance(data, dict) and isinstance(data.get("id"), str) and 1 <= len(data["id"]) <= 200:
            return data
        fail("Must be a voice name (1 to 64 characters) or an object with a string 'id'.")

    def to_representation(self, value):
        return value


class SpeechRequest(StrictSerializer):
    """Speech synthesis; any member not listed is refused with unknown_parameter."""

    model = StrictCharField(max_length=MODEL_ID_MAX)
    input = StrictCharField(max_length=SPEECH_INPUT_MAX)
    voice = Voice()
    response_format = optional(StrictChoiceField, choices=SPEECH_FORMATS, default=SPEECH_DEFAULTS["response_format"])
    speed = optional(StrictFloatField, min_value=SPEECH_SPEED[0], max_value=SPEECH_SPEED[1],
                     default=SPEECH_DEFAULTS["speed"])
    instructions = optional(StrictCharField, max_length=4096)

    def to_internal_value(self, data):
        return {**SPEECH_DEFAULTS, **super().to_internal_value(data)}


# ---------------------------------------------------------------- embeddings

@extend_schema_field({"oneOf": [
    {"type": "string", "minLength": 1},
    {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1,
     "maxItems": settings.MAX_EMBEDDING_INPUTS},
]})
class EmbeddingInput(serializers.Field):
    def to_internal_value(self, data):
        if isinstance(data, str):
            if not data:
                fail("Must not be empty.", code="blank")
            return data
        if not isinstance(data, list) or not data:
            fail("Must be a string or a non-empty array of strings.")
        if len(data) > settings.MAX_EMBEDDING_INPUTS:
            fail(f"At most {settings.MAX_EMBEDDING_INPUTS} inputs per request.")
        errors = {index: [ErrorDetail("Must be a non-empty string.", code="invalid")]
                  for index, item in enumerate(data) if not isinstance(item, str) or not item}
        if errors:
            raise ValidationError(errors)
        return data

    def to_representation(self, value):
        return value


class EmbeddingsRequest(StrictSerializer):
    """Embeddings of a string or an array of strings; any member not listed is refused with unknown_parameter.

    With ``dimensions``, the number of inputs times the dimensions may be at most MAX_EMBEDDING_VALUES.
    """

    model = StrictCharField(max_length=MODEL_ID_MAX)
    input = EmbeddingInput()
    encoding_format = optional(StrictChoiceField, choices=EMBEDDING_FORMATS, default="float")
    dimensions = optional(StrictIntegerField, min_value=1, max_value=MAX_EMBEDDING_DIMENSIONS)
    user = optional(StrictCharField, max_length=256)

    def validate(self, attrs):
        # Every value is computed, sent back as JSON and, on the local model, done in this process:
        # one cheap request must not ask for millions of them.
        inputs = len(attrs["input"]) if isinstance(attrs["input"], list) else 1
        dimensions = attrs.get("dimensions")
        if dimensions is not None and inputs * dimensions > settings.MAX_EMBEDDING_VALUES:
            raise ValidationError({"input": [ErrorDetail(
                f"{inputs} inputs of {dimensions} dimensions is {inputs * dimensions} values; one request may ask "
                f"for at most {settings.MAX_EMBEDDING_VALUES}. Send fewer inputs or fewer dimensions.",
                code="invalid")]})
        return attrs

    def to_internal_value(self, data):
        return {"encoding_format": "float", **super().to_internal_value(data)}
