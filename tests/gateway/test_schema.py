"""The four metered operations are described in /openapi.json with their bodies and errors."""
import jsonschema
import pytest

from tests.conftest import bearer

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


# Every metered operation, with the type of model its example must name.
EXAMPLE_TYPES = {"/v1/chat/completions": "chat", "/v1/messages": "chat", "/v1/messages/count_tokens": "chat",
                 "/v1/images/generations": "image", "/v1/audio/speech": "speech", "/v1/embeddings": "embedding"}


def request_schema(schema: dict, path: str) -> tuple[dict, list]:
    """(the operation's JSON request body schema, resolvable on its own; its example bodies)."""
    content = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    return ({**content["schema"], "components": schema["components"]},
            [example["value"] for example in content.get("examples", {}).values()])


@pytest.mark.django_db
def test_the_anthropic_operations_require_what_the_service_requires(client, seeded, make_key):
    schema = client.get("/openapi.json").json()
    _, secret = make_key(tier="special", credits=100)
    valid = {"/v1/messages": {"model": "local-chat", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]},
             "/v1/messages/count_tokens": {"model": "local-chat", "messages": [{"role": "user", "content": "Hi"}]}}
    for path, body in valid.items():
        body_schema, _ = request_schema(schema, path)
        assert set(body_schema["required"]) == {"model", "messages", "max_tokens"} & set(body)
        validator = jsonschema.Draft7Validator(body_schema)
        assert not validator.is_valid({})
        assert client.post(path, body, content_type="application/json", **bearer(secret)).status_code == 200
        # Each member the schema requires is one the service refuses to go without, by name.
        for member in body_schema["required"]:
            partial = {name: value for name, value in body.items() if name != member}
            assert not validator.is_valid(partial)
            refused = client.post(path, partial, content_type="application/json", **bearer(secret))
            assert refused.status_code == 400, (path, member)
            assert refused.json()["error"]["type"] == "invalid_request_error" and member in refused.json()["error"][
                "message"]


@pytest.mark.django_db
def test_each_operations_example_names_a_shipped_model_of_its_type_and_is_served(client, seeded, make_key):
    schema = client.get("/openapi.json").json()
    _, secret = make_key(tier="special", credits=1000)
    for path, model_type in EXAMPLE_TYPES.items():
        body_schema, examples = request_schema(schema, path)
        assert examples, path
        for example in examples:
            model = seeded.models[example["model"]]
            assert model.type == model_type and model.is_configured(model.pool), (path, example["model"])
            jsonschema.Draft7Validator(body_schema).validate(example)
            response = client.post(path, example, content_type="application/json", **bearer(secret))
            assert response.status_code == 200, (path, response.content[:300])
