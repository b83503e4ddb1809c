"""The answers' shapes the OpenAPI schema declares for the metered operations: a chat completion's, and the
image, speech and embedding results (the image and speech results are rendered by theirs, gateway.services)."""
from typing import Any

from rest_framework import serializers


class Usage(serializers.Serializer):
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField(required=False)
    total_tokens = serializers.IntegerField()
    cost = serializers.IntegerField(required=False, help_text="Credits charged, for a model priced by the token "
                                                             "(docs/pricing.md).")


class ChatChoiceMessage(serializers.Serializer):
    role = serializers.CharField()
    content = serializers.CharField(allow_null=True)


class ChatChoice(serializers.Serializer):
    index = serializers.IntegerField()
    message = ChatChoiceMessage()
    logprobs = serializers.JSONField(allow_null=True)
    finish_reason = serializers.CharField(allow_null=True)


class ChatCompletion(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.CharField(help_text="chat.completion")
    created = serializers.IntegerField()
    model = serializers.CharField()
    choices = ChatChoice(many=True)
    usage = Usage(required=False)
    system_fingerprint = serializers.CharField(allow_null=True, required=False)


class GeneratedImage(serializers.Serializer):
    url = serializers.CharField(allow_null=True, help_text="Filled when response_format is url.")
    b64_json = serializers.CharField(allow_null=True, help_text="Filled when response_format is b64_json.")
    revised_prompt = serializers.CharField(required=False)


class ImageGenerationResult(serializers.Serializer):
    created = serializers.IntegerField()
    data: Any = GeneratedImage(many=True)  # a field: DRF's metaclass takes it off the class
    remaining_credits = serializers.IntegerField()


class SpeechResult(serializers.Serializer):
    object = serializers.CharField(help_text="audio.speech")
    model = serializers.CharField()
    audio_url = serializers.CharField()
    format = serializers.CharField(help_text="Format of the stored file (local models write wav).")
    content_type = serializers.CharField()
    created = serializers.IntegerField()
    remaining_credits = serializers.IntegerField()


class EmbeddingItem(serializers.Serializer):
    object = serializers.CharField(help_text="embedding")
    index = serializers.IntegerField()
    embedding = serializers.JSONField(help_text="Array of floats, or base64 of little-endian float32.")


class EmbeddingsResult(serializers.Serializer):
    object = serializers.CharField(help_text="list")
    data: Any = EmbeddingItem(many=True)  # a field: DRF's metaclass takes it off the class
    model = serializers.CharField()
    usage = Usage()
    embedding = serializers.JSONField(help_text="One vector for a string input, a list of vectors for an array.")
    remaining_credits = serializers.IntegerField()
