"""What a newcomer meets first: the local chat's words, an unknown path's 404 and its log line, /docs/ with
a slash, and speech fetched the way OpenAI's own examples fetch it."""
import io
import logging
import wave

import pytest
from django.core.cache import cache
from rest_framework.renderers import JSONRenderer

from gateway import local_models
from gateway.conversation_request import conversation_from_chat
from gateway.media_views import wants_raw_audio
from keys import auth_cache
from keys.models import ApiKey
from models_catalog.models import UsageEvent
from tests.conftest import bearer
from tests.gateway.conftest import post

pytestmark = pytest.mark.django_db
SPEECH = "/v1/audio/speech"


def chat_reply(messages: list[dict]) -> str:
    """The model's reply to chat's messages, read as the local adapter reads them."""
    return local_models.chat_reply(conversation_from_chat(messages))


def summaries(caplog) -> list[dict]:
    return [record.request_fields for record in caplog.records if hasattr(record, "request_fields")]


# ---------------------------------------------------------------- the local chat's reply

@pytest.mark.parametrize("text, counted", [
    ("Hi", "1 word, 2 characters and about 1 token."),
    ("Hello there, friend", "3 words, 19 characters and about 5 tokens."),
])
def test_the_local_chat_counts_in_words_that_agree_with_their_numbers(text, counted):
    reply = chat_reply([{"role": "user", "content": text}])
    assert f"Your message has {counted} You wrote:" in reply


def test_a_one_token_message_is_answered_in_the_singular_through_the_api(client, seeded, free_key):
    _, secret = free_key
    body = {"model": "local-chat", "messages": [{"role": "user", "content": "Hi"}]}
    reply = post(client, "/v1/chat/completions", body, secret).json()["choices"][0]["message"]["content"]
    assert "about 1 token." in reply and "tokens" not in reply and "1 characters" not in reply


# ---------------------------------------------------------------- a path the service does not have

@pytest.mark.parametrize("path", ["/v1/no-such-route", "/chat/completions", "/v1/ünïcode"])
def test_an_unknown_path_is_answered_in_the_same_json_as_every_other_error(client, seeded, path):
    response = client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body == {"error": {"message": f"No operation at {path}.", "type": "invalid_request_error",
                              "param": None, "code": "not_found"}}
    # Byte for byte what an API view's error is (no spaces after separators, UTF-8 as it is).
    assert response.content == JSONRenderer().render(body)
    from_a_view = client.get("/v1/models/no-such-model")
    assert from_a_view.content == JSONRenderer().render(from_a_view.json())


@pytest.mark.parametrize("path", ["/v1/no-such-route", "/chat/completions"])
def test_an_unknown_paths_log_line_names_the_valid_key_that_was_sent(client, seeded, free_key, caplog, path):
    key, secret = free_key
    caplog.set_level(logging.INFO, logger="gateway.requests")
    assert client.get(path, **bearer(secret)).status_code == 404
    assert client.get(path, HTTP_X_API_KEY=secret).status_code == 404  # as Anthropic's clients send it
    assert client.get(path).status_code == 404
    assert [line["key"] for line in summaries(caplog)] == [key.prefix, key.prefix, ""]


@pytest.mark.parametrize("sent", ["Bearer sk-" + "x" * 43, "Bearer not-a-key", "Basic abc", "revoked"])
def test_an_unknown_paths_log_line_names_no_key_that_would_not_authenticate(client, seeded, make_key, caplog,
                                                                            sent):
    key, secret = make_key()
    if sent == "revoked":
        ApiKey.objects.filter(pk=key.pk).update(is_active=False)
        sent = f"Bearer {secret}"
    caplog.set_level(logging.INFO, logger="gateway.requests")
    response = client.get("/v1/no-such-route", HTTP_AUTHORIZATION=sent)
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert [line["key"] for line in summaries(caplog)] == [""]


def test_an_unknown_path_costs_no_query_without_a_key_nor_for_a_key_this_process_holds(
        client, seeded, free_key, django_assert_num_queries):
    _, secret = free_key
    with django_assert_num_queries(0):
        client.get("/v1/no-such-route")
    auth_cache.clear()
    with django_assert_num_queries(1):  # the key's row, read as a request's authentication reads it
        client.get("/v1/no-such-route", **bearer(secret))
    with django_assert_num_queries(0):  # then held, as for the key's metered requests
        client.get("/v1/no-such-route", **bearer(secret))


def test_unknown_keys_on_unknown_paths_count_as_failed_authentications_and_stop_costing_reads(
        client, seeded, settings, django_assert_num_queries):
    settings.AUTH_FAILURES_PER_MINUTE = 3
    cache.clear()
    for attempt in range(4):  # the fourth failure puts the address over the limit
        with django_assert_num_queries(1):
            assert client.get("/v1/no-such-route", **bearer(f"sk-{attempt:043d}")).status_code == 404
    with django_assert_num_queries(0):  # a known guesser's next keys are not looked up
        response = client.get("/v1/no-such-route", **bearer("sk-" + "9" * 43))
    assert response.status_code == 404  # the path still does not exist: a 404, not a 429


# ---------------------------------------------------------------- /docs/

def test_docs_with_a_trailing_slash_leads_to_docs(client):
    response = client.get("/docs/")
    assert response.status_code == 301
    assert response["Location"] == "/docs"
    assert client.get("/docs/?tag=models")["Location"] == "/docs?tag=models"
    assert client.get(response["Location"]).status_code == 200


# ---------------------------------------------------------------- speech as OpenAI's examples fetch it

@pytest.mark.parametrize("accept", [None, "*/*", "application/*", "text/html,*/*;q=0.8", "application/json;q=0",
                                    "application/octet-stream", "audio/*", "audio/mpeg, application/json;q=0.5"])
def test_speech_is_the_audio_itself_unless_the_client_asks_for_json(client, seeded, local_key, settings, accept):
    # `curl ... --output speech.mp3` sends Accept: */*; OpenAI answers it with the audio, so must the gateway.
    key, secret = local_key
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    response = post(client, SPEECH, {"model": "local-speech", "input": "Hi", "voice": "nova"}, secret, **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "audio/wav"
    assert response.content.startswith(b"RIFF")
    assert "Accept" in response["Vary"]
    assert response["X-Remaining-Credits"] == str(ApiKey.objects.get(pk=key.pk).credits)
    assert not (settings.MEDIA_ROOT / "audio").exists()  # nothing stored: the client has the bytes
    assert UsageEvent.objects.get().operation == "speech"


@pytest.mark.parametrize("accept", ["application/json", "application/json, */*",
                                    "application/json, text/plain, */*", "audio/*;q=0.5, application/json"])
def test_speech_is_json_with_an_audio_url_for_a_client_that_asks_for_json(client, seeded, local_key, accept):
    _, secret = local_key
    response = post(client, SPEECH, {"model": "local-speech", "input": "Hi", "voice": "nova"}, secret,
                    HTTP_ACCEPT=accept)
    assert response["Content-Type"] == "application/json"
    assert response.json()["audio_url"].endswith(".wav")


@pytest.mark.parametrize("asked", ["mp3", "opus", "aac", "flac", "wav"])
def test_a_format_the_local_model_cannot_write_is_answered_as_the_wav_it_is(client, seeded, local_key, asked):
    # Never mp3's content type on WAV bytes: a player trusting the label would fail (docs/metered-operations.md).
    _, secret = local_key
    body = {"model": "local-speech", "input": "Hi", "voice": "nova", "response_format": asked}
    response = post(client, SPEECH, body, secret)
    assert response["Content-Type"] == "audio/wav"
    with wave.open(io.BytesIO(response.content)) as audio:
        assert (audio.getnchannels(), audio.getsampwidth(), audio.getframerate()) == (1, 2, 24000)
    described = post(client, SPEECH, body, secret, HTTP_ACCEPT="application/json").json()
    assert (described["format"], described["content_type"]) == ("wav", "audio/wav")


def test_the_openai_sdks_accept_header_still_gets_the_audio():
    # The Accept header openai's audio.speech.create sends (tests/gateway/test_openai_sdk.py drives it end to end).
    from openai.resources.audio import speech

    with open(speech.__file__) as source:
        assert '"Accept": "application/octet-stream"' in source.read()
    assert wants_raw_audio("application/octet-stream")
