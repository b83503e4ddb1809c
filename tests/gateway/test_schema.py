"""The four metered operations are described in /openapi.json with their bodies and errors."""
import pytest

OPERATIONS = {"/v1/chat/completions": "ChatCompletionRequest", "/v1/images/generations": "ImageGenerationRequest",
              "/v1/audio/speech": "SpeechRequest", "/v1/embeddings": "EmbeddingsRequest"}


@pytest.mark.django_db
def test_openapi_describes_each_operation_with_its_request_and_every_error(client):
    schema = client.get("/openapi.json").json()
    for path, request_schema in OPERATIONS.items():
        operation = schema["paths"][path]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{request_schema}"}
        assert {"200", "400", "401", "402", "403", "404", "413", "429", "500", "502", "504"} <= set(
            operation["responses"])
    streamed = schema["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
    assert set(streamed) == {"application/json", "text/event-stream"}
    assert "application/octet-stream" in schema["paths"]["/v1/audio/speech"]["post"]["responses"]["200"]["content"]
