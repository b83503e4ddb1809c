"""The official openai Python SDK, unchanged, against the gateway served by a live server."""
import base64

import openai
import pytest
import requests

from gateway import local_media
from keys.models import ApiKey
from models_catalog.models import UsageEvent


@pytest.fixture
def sdk(live_server, seeded, local_key):
    key, secret = local_key
    # Closed at the end: a kept-alive connection would hold a live-server thread and its database session.
    with openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=secret, max_retries=0, timeout=30) as client:
        yield client, key


def test_chat_completions_work_through_the_sdk(sdk):
    client, key = sdk
    completion = client.chat.completions.create(model="local-chat",
                                                messages=[{"role": "user", "content": "Hello from the SDK"}])
    assert completion.object == "chat.completion"
    assert completion.model == "local-chat"
    assert "Hello from the SDK" in completion.choices[0].message.content
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    assert ApiKey.objects.get(pk=key.pk).credits == 99


def test_streamed_chat_works_through_the_sdk_with_usage(sdk):
    client, _ = sdk
    messages = [{"role": "user", "content": "Stream via the SDK"}]
    stream = client.chat.completions.create(model="local-chat", messages=messages, stream=True,
                                            stream_options={"include_usage": True})
    parts = list(stream)
    text = "".join(part.choices[0].delta.content or "" for part in parts if part.choices)
    assert text == client.chat.completions.create(model="local-chat", messages=messages).choices[0].message.content
    assert parts[-1].choices == [] and parts[-1].usage.completion_tokens > 0
    assert UsageEvent.objects.filter(success=True).count() == 2


def test_the_raw_headers_carry_credits_and_limits(sdk):
    client, _ = sdk
    raw = client.chat.completions.with_raw_response.create(model="local-chat",
                                                          messages=[{"role": "user", "content": "Hi"}])
    assert raw.headers["x-remaining-credits"] == "99"
    assert raw.headers["x-ratelimit-limit-requests"] == "60"
    assert raw.headers["x-ratelimit-remaining-requests"] == "59"


def test_images_work_through_the_sdk_and_their_url_can_be_fetched(sdk):
    client, key = sdk
    result = client.images.generate(model="local-image", prompt="a lighthouse", n=2, size="128x64")
    assert len(result.data) == 2
    image = requests.get(result.data[0].url, timeout=10)
    assert image.status_code == 200 and image.headers["Content-Type"] == "image/png"
    assert image.content.startswith(b"\x89PNG")
    inline = client.images.generate(model="local-image", prompt="a lighthouse", size="64x64",
                                    response_format="b64_json")
    assert base64.b64decode(inline.data[0].b64_json).startswith(b"\x89PNG")
    assert ApiKey.objects.get(pk=key.pk).credits == 100 - 2 * 2 - 2


def test_speech_works_through_the_sdk_as_raw_audio(sdk):
    client, _ = sdk
    audio = client.audio.speech.create(model="local-speech", voice="alloy", input="Hello SDK", response_format="wav")
    assert audio.content.startswith(b"RIFF")
    assert audio.response.headers["content-type"] == "audio/wav"


def test_embeddings_work_through_the_sdk_which_asks_for_base64(sdk):
    client, _ = sdk
    result = client.embeddings.create(model="local-embedding", input=["alpha beta", "gamma"])
    assert [item.index for item in result.data] == [0, 1]
    assert result.data[0].embedding == pytest.approx(local_media.embed("alpha beta"), abs=1e-6)
    floats = client.embeddings.create(model="local-embedding", input="gamma", encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(local_media.embed("gamma"), abs=1e-12)
    assert result.usage.prompt_tokens > 0


def test_sdk_errors_carry_the_contract_code(sdk):
    client, _ = sdk
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "Hi"}])
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as unknown:
        client.chat.completions.create(model="local-chat", messages=[{"role": "user", "content": "Hi"}],
                                       extra_body={"frobnicate": 1})
    assert unknown.value.code == "unknown_parameter"
    assert unknown.value.param == "frobnicate"
