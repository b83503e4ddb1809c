"""Azure OpenAI deployments (gateway/upstream/azure.py), proven against a fake Azure resource (azure_fake.py).

The fake is first held to the official openai SDK's AzureOpenAI client, pointed at it: its paths,
key header, api-version and answers are what the real client sends and reads. Then the gateway is
driven through it by the openai SDK, as users drive it, for all four operations, the api-version
(the default and the catalog's), the health rules and the place of the secret.
"""
import base64
import json
import logging
import struct
import time

import openai
import pytest
import requests

from gateway import deployment_health, probes
from keys.ledger import mismatches
from models_catalog import catalog
from models_catalog.models import Deployment, Provider, UsageEvent
from models_catalog.provider_types import DEFAULT_AZURE_API_VERSION
from tests.gateway.azure_fake import (  # noqa: F401 (the azure fixture)
    AZURE_KEY,
    AZURE_KEY_ENV,
    PNG_1X1,
    UNAUTHORIZED,
    FakeAzure,
    Reply,
    azure,
    azure_error,
    completion,
    stream_events,
)
from tests.gateway.conftest import assert_told_nowhere, closed_port_url, credits_of, failed_answers, serve
from utils_app import metrics

HELLO = [{"role": "user", "content": "Hello"}]
MODELS = {"chat": ("az-chat", "chat-dep"), "embedding": ("az-embed", "embed-dep"), "image": ("az-image", "image-dep"),
          "speech": ("az-speech", "speech-dep")}


def official(fake: FakeAzure, api_key: str = AZURE_KEY) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(azure_endpoint=fake.endpoint, api_key=api_key, api_version=DEFAULT_AZURE_API_VERSION,
                              max_retries=0, timeout=10)


# ---------------------------------------------------------------- the fake, against the official client

def test_the_official_azure_client_reads_every_operation_of_the_fake(azure):
    client = official(azure)
    chat = client.chat.completions.create(model="chat-dep", messages=HELLO)
    assert chat.choices[0].message.content == "Hello from Azure" and chat.usage.total_tokens == 16
    streamed = list(client.chat.completions.create(model="chat-dep", messages=HELLO, stream=True,
                                                   stream_options={"include_usage": True}))
    assert streamed[0].choices == [] and streamed[0].model_extra["prompt_filter_results"]  # Azure's opening chunk
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == "Hello from Azure"
    assert streamed[-1].usage.prompt_tokens == 10
    vectors = client.embeddings.create(model="embed-dep", input=["ab", "abc"])  # base64, as the SDK asks
    assert len(vectors.data) == 2 and len(vectors.data[0].embedding) == 3
    image = client.images.generate(model="image-dep", prompt="a fox", response_format="b64_json")
    assert base64.b64decode(image.data[0].b64_json) == PNG_1X1
    assert client.images.generate(model="image-dep", prompt="a fox").data[0].url.endswith("/files/image.png")
    assert client.audio.speech.create(model="speech-dep", voice="alloy", input="Hi").content == b"ID3azure-mp3-bytes"
    paths = [(call.path, call.query["api-version"], call.headers.get("api-key")) for call in azure.posts()]
    assert paths == [(f"/openai/deployments/{name}/{operation}", [DEFAULT_AZURE_API_VERSION], AZURE_KEY)
                     for name, operation in [("chat-dep", "chat/completions"), ("chat-dep", "chat/completions"),
                                             ("embed-dep", "embeddings"), ("image-dep", "images/generations"),
                                             ("image-dep", "images/generations"), ("speech-dep", "audio/speech")]]


def test_the_official_azure_client_reads_the_fakes_errors(azure):
    with pytest.raises(openai.AuthenticationError) as refused:
        official(azure, api_key="f" * 32).chat.completions.create(model="chat-dep", messages=HELLO)
    assert refused.value.code == "401"
    azure.fail(429, azure_error("429", "Requests to the ChatCompletions_Create Operation have exceeded token rate "
                                       "limit. Please retry after 6 seconds."), {"Retry-After": "6"})
    with pytest.raises(openai.RateLimitError) as limited:
        official(azure).chat.completions.create(model="chat-dep", messages=HELLO)
    assert limited.value.response.headers["retry-after"] == "6"
    with pytest.raises(openai.NotFoundError):
        official(azure).chat.completions.create(model="no-such-dep", messages=HELLO)


# ---------------------------------------------------------------- the gateway, through the fake

def add_azure(name: str, fake: FakeAzure | None, *, api_version: str = "", timeout: float = 5.0) -> Provider:
    return Provider.objects.create(name=name, type="azure", base_url=fake.endpoint if fake else
                                   closed_port_url().removesuffix("/v1"), api_key_env=AZURE_KEY_ENV,
                                   api_version=api_version, timeout=timeout)


@pytest.fixture
def resource(azure, monkeypatch, db):
    monkeypatch.setenv(AZURE_KEY_ENV, AZURE_KEY)
    provider = add_azure("azure-eu", azure)
    for operation, (model_id, deployment) in MODELS.items():
        serve(model_id, [(provider, deployment, 1)], type=operation)
    return provider


def secret_placed(call) -> None:
    assert call.headers["api-key"] == AZURE_KEY and "Authorization" not in call.headers
    assert AZURE_KEY not in call.path and AZURE_KEY not in json.dumps(call.query)


def test_chat_goes_to_the_azure_deployment_with_the_default_api_version(sdk, resource, azure):
    client, key = sdk
    azure.script("chat", Reply(body=completion("Bonjour", prompt_tokens=30, completion_tokens=5, cached=24)))
    answer = client.chat.completions.create(model="az-chat", messages=HELLO, temperature=0.5)
    assert answer.model == "az-chat" and answer.choices[0].message.content == "Bonjour"
    [call] = azure.posts()
    assert call.path == "/openai/deployments/chat-dep/chat/completions"
    assert call.query == {"api-version": [DEFAULT_AZURE_API_VERSION]}
    secret_placed(call)
    assert call.body == {"model": "chat-dep", "messages": HELLO, "temperature": 0.5, "stream": False}
    assert credits_of(key) == 99 and mismatches() == []
    event = UsageEvent.objects.get()
    assert (event.input_tokens, event.output_tokens, event.cached_tokens, event.provider) == (30, 5, 24, "azure-eu")


def test_the_api_version_comes_from_the_catalog(sdk, azure, monkeypatch, tmp_path, db):
    client, _ = sdk
    monkeypatch.setenv(AZURE_KEY_ENV, AZURE_KEY)
    path = tmp_path / "catalog.toml"
    path.write_text(f'''
[providers.azure-us]
type = "azure"
base_url = "{azure.endpoint}"
api_key_env = "{AZURE_KEY_ENV}"
api_version = "2025-01-01-preview"

[[models]]
id = "az-chat"
type = "chat"
owned_by = "openai"
cost = 1
access = ["free"]
provider = "azure-us"
upstream_model = "chat-dep"
''')
    catalog.load_catalog(path)
    client.chat.completions.create(model="az-chat", messages=HELLO)
    assert azure.posts()[0].query == {"api-version": ["2025-01-01-preview"]}


def test_azures_stream_reaches_the_client_as_openais_without_the_prompt_filter_chunk(sdk, resource, azure):
    """Azure opens a stream with a chunk that has no choices (its prompt filter results): a client reading
    choices[0] of every chunk, which OpenAI's streams allow, would break on it."""
    client, key = sdk
    chunks = list(client.chat.completions.create(model="az-chat", messages=HELLO, stream=True))
    assert chunks and all(chunk.choices for chunk in chunks)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == "Hello from Azure"
    with_usage = list(client.chat.completions.create(model="az-chat", messages=HELLO, stream=True,
                                                     stream_options={"include_usage": True}))
    assert [chunk for chunk in with_usage if not chunk.choices] == [with_usage[-1]]
    assert with_usage[-1].usage.completion_tokens == 3
    assert credits_of(key) == 98 and mismatches() == []
    assert [(event.input_tokens, event.output_tokens) for event in UsageEvent.objects.order_by("id")] == [(10, 3)] * 2


def test_embeddings_images_and_speech_go_to_their_azure_deployments(sdk, resource, azure):
    client, key = sdk
    vectors = client.embeddings.create(model="az-embed", input=["ab", "abcd"])
    assert [item.embedding for item in vectors.data] == [
        pytest.approx(list(struct.unpack("<3f", struct.pack("<3f", *[0.2, 0.25, 0.3])))),
        pytest.approx(list(struct.unpack("<3f", struct.pack("<3f", *[0.4, 0.45, 0.5]))))]
    image = client.images.generate(model="az-image", prompt="a fox", size="1024x1024")
    assert requests.get(image.data[0].url, timeout=10).content == PNG_1X1  # fetched from Azure, served by us
    inline = client.images.generate(model="az-image", prompt="a fox", response_format="b64_json")
    assert base64.b64decode(inline.data[0].b64_json) == PNG_1X1
    audio = client.audio.speech.create(model="az-speech", voice="alloy", input="Hello")
    assert audio.content == b"ID3azure-mp3-bytes"
    assert [call.path for call in azure.posts()] == [
        "/openai/deployments/embed-dep/embeddings", "/openai/deployments/image-dep/images/generations",
        "/openai/deployments/image-dep/images/generations", "/openai/deployments/speech-dep/audio/speech"]
    for call in azure.posts():
        secret_placed(call)
        assert call.query == {"api-version": [DEFAULT_AZURE_API_VERSION]}
    assert credits_of(key) == 100 - 1 - 2 * 1 - 1 and mismatches() == []


def test_a_refused_key_disables_the_azure_deployment_and_the_next_one_answers(sdk, azure, monkeypatch, caplog):
    client, key = sdk
    monkeypatch.setenv(AZURE_KEY_ENV, AZURE_KEY)
    other = FakeAzure().start()
    try:
        azure.fail(401, UNAUTHORIZED)
        other.script("chat", Reply(body=completion("from the other region")))
        serve("az-chat", [(add_azure("azure-eu", azure), "chat-dep", 1), (add_azure("azure-us", other), "chat-dep", 2)])
        with caplog.at_level(logging.INFO):
            answer = client.chat.completions.create(model="az-chat", messages=HELLO)
            client.chat.completions.create(model="az-chat", messages=HELLO)
        assert answer.choices[0].message.content == "from the other region"
    finally:
        other.stop()
    refused = Deployment.objects.get(provider__name="azure-eu")
    assert refused.disabled_at and "HTTP 401" in refused.disabled_reason
    assert len(azure.posts()) == 1 and len(other.posts()) == 2
    assert AZURE_KEY not in caplog.text and azure.endpoint not in caplog.text
    assert credits_of(key) == 98 and mismatches() == []


def test_an_azure_429_cools_the_deployment_for_its_retry_after(sdk, azure, monkeypatch):
    client, key = sdk
    monkeypatch.setenv(AZURE_KEY_ENV, AZURE_KEY)
    other = FakeAzure().start()
    try:
        azure.fail(429, azure_error("429", "Rate limit is exceeded. Try again in 37 seconds."),
                   {"Retry-After": "37", "retry-after-ms": "37000"})
        serve("az-chat", [(add_azure("azure-eu", azure), "chat-dep", 1), (add_azure("azure-us", other), "chat-dep", 2)])
        for _ in range(2):
            assert client.chat.completions.create(model="az-chat", messages=HELLO).choices[0].message.content
    finally:
        other.stop()
    assert len(azure.posts()) == 1
    cooled = Deployment.objects.get(provider__name="azure-eu")
    state = deployment_health.states([cooled])[cooled.pk]
    assert state.state == "cooling" and 30 < state.cooldown_until - time.time() <= 37 and not cooled.disabled_at
    assert credits_of(key) == 98 and mismatches() == []


def test_azures_content_filter_refusal_is_passed_on_and_costs_nothing(sdk, resource, azure):
    client, key = sdk
    azure.script("chat", Reply(400, azure_error(
        "content_filter", "The response was filtered due to the prompt triggering Azure OpenAI's content management "
                          "policy.", param="prompt", type=None, status=400,
        innererror={"code": "ResponsibleAIPolicyViolation"})))
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="az-chat", messages=HELLO)
    assert (refused.value.code, refused.value.param) == ("content_filter", "prompt")
    assert len(azure.posts()) == 1 and credits_of(key) == 100 and mismatches() == []


def test_the_secret_is_in_no_url_error_log_line_or_metric_with_a_resource_that_refuses_it_or_is_down(
        sdk, azure, monkeypatch, caplog, settings, client):
    settings.METRICS_TOKEN = "metrics-token-0123456789"
    metrics.reset()
    sdk_client, key = sdk
    monkeypatch.setenv(AZURE_KEY_ENV, AZURE_KEY)
    azure.fail(401, azure_error("401", f"Access denied for key {AZURE_KEY} at {azure.endpoint}/openai"))
    serve("refusing", [(add_azure("refusing", azure), "chat-dep", 1)])
    serve("refusing-streamed", [(add_azure("refusing-streamed", azure), "chat-dep", 1)])
    serve("down", [(add_azure("down", None), "chat-dep", 1)])
    down_url = Provider.objects.get(name="down").base_url
    with caplog.at_level(logging.DEBUG, logger="gateway"), caplog.at_level(logging.INFO):
        bodies = failed_answers(sdk_client, [("refusing", False), ("refusing-streamed", True), ("down", False),
                                             ("down", True)])
    assert_told_nowhere(client, [*bodies, caplog.text], AZURE_KEY, azure.endpoint, down_url)
    for call in azure.calls:
        secret_placed(call)
    assert credits_of(key) == 100 and mismatches() == []


def test_an_azure_image_deployment_is_probed_without_generating_an_image(resource, azure):
    deployment = Deployment.objects.select_related("model", "provider").get(model__model_id="az-image")
    deployment_health.disable(deployment, reason="HTTP 401")
    deployment.refresh_from_db()  # as the probes read it: disabled
    result = probes.probe(deployment)
    assert (result.ok, result.enabled) == (True, True)
    assert not Deployment.objects.filter(disabled_at__isnull=False).exists()
    [call] = azure.calls
    assert (call.method, call.path, call.query) == ("GET", "/openai/models", {"api-version": [DEFAULT_AZURE_API_VERSION]})
    secret_placed(call)


def test_an_azure_stream_of_chat_chunks_in_azures_shape_is_charged_once(sdk, resource, azure):
    client, key = sdk
    azure.script("chat", Reply(events=stream_events("One", " two", include_usage=True, cached=6)))
    chunks = list(client.chat.completions.create(model="az-chat", messages=HELLO, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 6
    assert credits_of(key) == 99 and UsageEvent.objects.get().cached_tokens == 6 and mismatches() == []
