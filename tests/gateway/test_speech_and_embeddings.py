"""POST /v1/audio/speech and POST /v1/embeddings."""
import base64
import io
import math
import struct
import wave
from urllib.parse import urlsplit

import pytest

from gateway import local_media
from keys.ledger import mismatches
from keys.models import ApiKey
from models_catalog.models import UsageEvent
from tests.gateway.conftest import assert_error, post

pytestmark = pytest.mark.django_db
SPEECH = "/v1/audio/speech"
EMBEDDINGS = "/v1/embeddings"


def wav_info(content: bytes) -> tuple[int, int, int]:
    with wave.open(io.BytesIO(content)) as audio:
        return audio.getnchannels(), audio.getsampwidth(), audio.getframerate()


# ---------------------------------------------------------------- speech

def test_speech_answers_json_with_an_audio_url_to_a_client_that_asks_for_json(client, seeded, local_key, settings):
    key, secret = local_key
    response = post(client, SPEECH, {"model": "local-speech", "input": "Hello world", "voice": "alloy"}, secret,
                    HTTP_ACCEPT="application/json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["object"] == "audio.speech"
    assert body["model"] == "local-speech"
    assert body["remaining_credits"] == 98 == ApiKey.objects.get(pk=key.pk).credits
    # The local model can only write WAV: it says so instead of mislabelling it as mp3.
    assert (body["format"], body["content_type"]) == ("wav", "audio/wav")
    served = client.get(urlsplit(body["audio_url"]).path)
    assert served["Content-Type"] == "audio/wav"
    assert wav_info(b"".join(served.streaming_content)) == (1, 2, 24000)
    assert UsageEvent.objects.get().operation == "speech"


@pytest.mark.parametrize("accept", ["application/octet-stream", "audio/*", "audio/mpeg, application/json;q=0.5"])
def test_a_client_that_accepts_audio_gets_the_raw_bytes(client, seeded, local_key, accept, settings):
    _, secret = local_key
    response = post(client, SPEECH, {"model": "local-speech", "input": "Hi", "voice": "nova"}, secret,
                    HTTP_ACCEPT=accept)
    assert response.status_code == 200
    assert response["Content-Type"] == "audio/wav"
    assert "Accept" in response["Vary"]
    assert response["X-Remaining-Credits"] == "98"
    assert response.content.startswith(b"RIFF")
    assert not (settings.MEDIA_ROOT / "audio").exists()


def test_json_is_kept_when_the_client_prefers_it(client, seeded, local_key):
    _, secret = local_key
    response = post(client, SPEECH, {"model": "local-speech", "input": "Hi", "voice": "nova"}, secret,
                    HTTP_ACCEPT="application/json, audio/*;q=0.1")
    assert "audio_url" in response.json()


def test_pcm_is_raw_16_bit_samples(client, seeded, local_key):
    _, secret = local_key
    body = {"model": "local-speech", "input": "Hi there", "voice": "echo", "response_format": "pcm", "speed": 2}
    response = post(client, SPEECH, body, secret, HTTP_ACCEPT="application/octet-stream")
    assert response["Content-Type"] == "audio/pcm"
    assert response.content == local_media.synthesize_pcm("Hi there", voice="echo", speed=2)


@pytest.mark.parametrize("member, value, code", [
    ("input", "", "missing_field"), ("input", "x" * 4097, "invalid_value"), ("input", 3, "invalid_value"),
    ("voice", "", "invalid_value"), ("voice", 7, "invalid_value"), ("response_format", "ogg", "invalid_value"),
    ("speed", 0.2, "invalid_value"), ("speed", 4.5, "invalid_value"), ("speed", "fast", "invalid_value"),
])
def test_invalid_speech_requests_are_refused(client, seeded, local_key, member, value, code):
    key, secret = local_key
    body = {"model": "local-speech", "input": "Hello", "voice": "alloy", member: value}
    assert_error(post(client, SPEECH, body, secret), 400, code, param=member)
    assert ApiKey.objects.get(pk=key.pk).credits == 100


def test_voice_is_required(client, seeded, local_key):
    _, secret = local_key
    assert_error(post(client, SPEECH, {"model": "local-speech", "input": "Hello"}, secret), 400, "missing_field",
                 param="voice")


def test_upstream_speech_bytes_are_relayed_with_their_content_type(client, fake_models, upstream, free_key):
    _, secret = free_key
    upstream.raw("/audio/speech", b"ID3-mp3-bytes", content_type="audio/mpeg")
    response = post(client, SPEECH, {"model": "fake-speech", "input": "Hello", "voice": {"id": "voice_123"}},
                    secret, HTTP_ACCEPT="application/octet-stream")
    assert (response.content, response["Content-Type"]) == (b"ID3-mp3-bytes", "audio/mpeg")
    assert upstream.posts()[0].body == {"model": "up-speech", "input": "Hello", "voice": {"id": "voice_123"}}
    stored = post(client, SPEECH, {"model": "fake-speech", "input": "Hello", "voice": "alloy"}, secret,
                  HTTP_ACCEPT="application/json").json()
    assert stored["audio_url"].endswith(".mp3")
    assert client.get(urlsplit(stored["audio_url"]).path)["Content-Type"] == "audio/mpeg"


@pytest.mark.parametrize("content_type", ["text/html; charset=utf-8", "application/json", "text/plain",
                                          "application/problem+json", "application/xhtml+xml", "TEXT/HTML"])
def test_a_page_or_document_sent_as_speech_is_no_audio_and_costs_nothing(client, fake_models, upstream, free_key,
                                                                         content_type):
    """An upstream (or a proxy in front of it) answering 200 with an error page or a JSON document: a 502,
    refunded, never relayed or stored as the client's audio."""
    key, secret = free_key
    upstream.raw("/audio/speech", b"<html><script>alert(1)</script></html>", content_type=content_type)
    response = post(client, SPEECH, {"model": "fake-speech", "input": "Hello", "voice": "alloy"}, secret,
                    HTTP_ACCEPT="application/octet-stream")
    assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_unavailable"
    assert b"script" not in response.content
    assert ApiKey.objects.get(pk=key.pk).credits == 100 and mismatches() == []


@pytest.mark.parametrize("content_type", ["audio/mpeg", "audio/ogg; codecs=opus", "application/ogg",
                                          "application/octet-stream", ""])
def test_speech_in_any_audio_type_is_relayed(client, fake_models, upstream, free_key, content_type):
    _, secret = free_key
    upstream.raw("/audio/speech", b"RIFF-bytes", content_type=content_type)
    response = post(client, SPEECH, {"model": "fake-speech", "input": "Hello", "voice": "alloy"}, secret,
                    HTTP_ACCEPT="application/octet-stream")
    assert response.status_code == 200 and response.content == b"RIFF-bytes"


# ---------------------------------------------------------------- embeddings

def test_a_string_input_gets_one_vector_in_both_shapes(client, seeded, free_key):
    key, secret = free_key
    response = post(client, EMBEDDINGS, {"model": "local-embedding", "input": "the quick brown fox"}, secret)
    assert response.status_code == 200
    body = response.json()
    assert body["embedding"] == body["data"][0]["embedding"] == local_media.embed("the quick brown fox")
    assert math.isclose(sum(value * value for value in body["embedding"]), 1.0, rel_tol=1e-9)
    assert (body["object"], body["model"], body["data"][0]["object"], body["data"][0]["index"]) == (
        "list", "local-embedding", "embedding", 0)
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    assert body["remaining_credits"] == 99 == ApiKey.objects.get(pk=key.pk).credits
    assert UsageEvent.objects.get().input_tokens == body["usage"]["prompt_tokens"]


def test_an_array_input_gets_a_list_of_vectors(client, seeded, free_key):
    _, secret = free_key
    body = post(client, EMBEDDINGS, {"model": "local-embedding", "input": ["cat", "dog", "cat"]}, secret).json()
    assert len(body["embedding"]) == 3
    assert body["embedding"][0] == body["embedding"][2] != body["embedding"][1]
    assert [item["index"] for item in body["data"]] == [0, 1, 2]


def test_base64_is_packed_little_endian_float32(client, seeded, free_key):
    _, secret = free_key
    body = post(client, EMBEDDINGS, {"model": "local-embedding", "input": "fox", "encoding_format": "base64",
                                     "dimensions": 8}, secret).json()
    packed = base64.b64decode(body["embedding"])
    values = struct.unpack("<8f", packed)
    assert values == pytest.approx(local_media.embed("fox", 8), abs=1e-6)


@pytest.mark.parametrize("member, value, param, code", [
    ("input", "", "input", "missing_field"),
    ("input", [], "input", "invalid_value"),
    ("input", ["ok", ""], "input.1", "invalid_value"),
    ("input", [1, 2, 3], "input.0", "invalid_value"),
    ("input", 12, "input", "invalid_value"),
    ("input", ["x"] * 2049, "input", "invalid_value"),
    ("encoding_format", "int8", "encoding_format", "invalid_value"),
    ("dimensions", 0, "dimensions", "invalid_value"),
    ("dimensions", 5000, "dimensions", "invalid_value"),
])
def test_invalid_embedding_requests_are_refused(client, seeded, free_key, member, value, param, code):
    _, secret = free_key
    body = {"model": "local-embedding", "input": "hello", member: value}
    assert_error(post(client, EMBEDDINGS, body, secret), 400, code, param=param)
    assert not UsageEvent.objects.exists()


def test_upstream_embeddings_are_passed_on_with_the_spec_members(client, fake_models, upstream, free_key):
    _, secret = free_key
    upstream.succeed_all()
    body = post(client, EMBEDDINGS, {"model": "fake-embedding", "input": ["only one"]}, secret).json()
    assert body["embedding"] == [[0.6, 0.8]]
    assert body["model"] == "fake-embedding"
    assert upstream.posts()[0].body == {"model": "up-embedding", "input": ["only one"]}
    assert UsageEvent.objects.get().input_tokens == 5
