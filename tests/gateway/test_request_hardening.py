"""Bad input on the metered operations: lone surrogates, the caps on one request's cost, media races."""
import json
import re

import pytest

from gateway import media
from gateway.media_serializers import ImageGenerationRequest
from keys.models import ApiKey
from models_catalog.models import UsageEvent
from tests.gateway.conftest import assert_error, post

pytestmark = pytest.mark.django_db
CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"


def credits_of(key) -> int:
    return ApiKey.objects.get(pk=key.pk).credits


def raw_chat(content_json: str, member: str = "content") -> bytes:
    """A chat body whose message member is written as raw JSON text (to carry escapes as sent)."""
    return ('{"model": "local-chat", "messages": [{"role": "user", "%s": %s}]}' % (member, content_json)).encode()


# ---------------------------------------------------------------- lone surrogates

def test_a_lone_surrogate_in_a_member_name_is_a_400(client, seeded, free_key):
    key, secret = free_key
    body = b'{"model": "local-chat", "messages": [{"role": "user", "content": "Hi"}], "\\ud800": 1}'
    error = assert_error(post(client, CHAT, body, secret), 400, "invalid_json")
    assert "surrogate" in error["message"]
    assert credits_of(key) == 100
    assert not UsageEvent.objects.exists()


@pytest.mark.parametrize("escaped", ['"\\udfff"', '"tail \\uD83D"', '[{"type": "text", "text": "\\udc00"}]'])
def test_local_chat_is_never_asked_to_echo_a_lone_surrogate(client, seeded, free_key, escaped):
    key, secret = free_key
    assert_error(post(client, CHAT, raw_chat(escaped), secret), 400, "invalid_json")
    assert credits_of(key) == 100
    assert not UsageEvent.objects.exists()


def test_an_escaped_surrogate_pair_is_one_character_and_is_served(client, seeded, free_key):
    key, secret = free_key
    response = post(client, CHAT, raw_chat('"fox \\ud83e\\udd8a"'), secret)
    assert response.status_code == 200, response.content
    assert "fox \U0001f98a" in response.json()["choices"][0]["message"]["content"]
    assert credits_of(key) == 99


def test_an_escaped_backslash_before_u_d800_is_plain_text(client, seeded, free_key):
    key, secret = free_key
    response = post(client, CHAT, raw_chat('"\\\\ud800"'), secret)
    assert response.status_code == 200, response.content
    assert "\\ud800" in response.json()["choices"][0]["message"]["content"]
    assert credits_of(key) == 99


# ---------------------------------------------------------------- the cost of one request

def test_chat_n_above_max_chat_n_is_refused_before_any_charge(client, seeded, free_key, settings):
    key, secret = free_key
    body = {"model": "local-chat", "messages": [{"role": "user", "content": "Hi"}], "n": settings.MAX_CHAT_N + 1}
    error = assert_error(post(client, CHAT, body, secret), 400, "invalid_value", param="n")
    assert str(settings.MAX_CHAT_N) in error["message"]
    assert credits_of(key) == 100


def test_chat_n_up_to_max_chat_n_is_served_with_that_many_choices(client, seeded, free_key, settings):
    key, secret = free_key
    body = {"model": "local-chat", "messages": [{"role": "user", "content": "Hi"}], "n": settings.MAX_CHAT_N}
    response = post(client, CHAT, body, secret)
    assert response.status_code == 200, response.content
    assert len(response.json()["choices"]) == settings.MAX_CHAT_N
    # Each choice is a completion: local-chat's cost (1) times n.
    assert credits_of(key) == int(response["X-Remaining-Credits"]) == 100 - settings.MAX_CHAT_N


def test_more_messages_than_max_chat_messages_are_refused(client, seeded, free_key, settings):
    key, secret = free_key
    messages = [{"role": "user", "content": "Hi"}] * (settings.MAX_CHAT_MESSAGES + 1)
    error = assert_error(post(client, CHAT, {"model": "local-chat", "messages": messages}, secret), 400,
                         "invalid_value", param="messages")
    assert str(settings.MAX_CHAT_MESSAGES) in error["message"]
    assert credits_of(key) == 100


def test_more_embedding_inputs_than_max_embedding_inputs_are_refused(client, seeded, free_key, settings):
    key, secret = free_key
    body = {"model": "local-embedding", "input": ["word"] * (settings.MAX_EMBEDDING_INPUTS + 1)}
    assert_error(post(client, EMBEDDINGS, body, secret), 400, "invalid_value", param="input")
    assert credits_of(key) == 100


def test_inputs_times_dimensions_above_the_cap_are_refused_before_any_charge(client, seeded, free_key, settings):
    key, secret = free_key
    # The reported case: 2048 inputs of 4096 dimensions, 8 million floats for one credit.
    body = {"model": "local-embedding", "input": ["word"] * 2048, "dimensions": 4096}
    error = assert_error(post(client, EMBEDDINGS, body, secret), 400, "invalid_value", param="input")
    assert str(settings.MAX_EMBEDDING_VALUES) in error["message"]
    assert credits_of(key) == 100
    assert not UsageEvent.objects.exists()


def test_inputs_times_dimensions_at_the_cap_are_served(client, seeded, free_key, settings):
    key, secret = free_key
    settings.MAX_EMBEDDING_VALUES = 3 * 512
    body = {"model": "local-embedding", "input": ["a", "b", "c"], "dimensions": 512}
    response = post(client, EMBEDDINGS, body, secret)
    assert response.status_code == 200, response.content
    assert [len(vector) for vector in response.json()["embedding"]] == [512, 512, 512]
    assert credits_of(key) == 99


# ---------------------------------------------------------------- the schema says what is accepted

@pytest.fixture(scope="module")
def size_schema(django_db_blocker):
    from django.test import Client

    with django_db_blocker.unblock():
        schema = Client().get("/openapi.json").json()
    return schema["components"]["schemas"]["ImageGenerationRequest"]["properties"]["size"]


@pytest.mark.parametrize("size", ["64x64", "4096x4096", "0064x100", "1024x1792", "999x1000", "63x64", "64x4097",
                                  "64x64\n", "\u0664\u0664x64", "64X64", "x64", "64x", "00000000000000000064x64"])
def test_the_image_size_in_the_schema_is_exactly_what_validation_accepts(size_schema, size):
    # An ECMA-262 pattern's $ is the end of the text, which is Python's \Z (Python's $ also
    # matches before a final newline).
    ecma = re.compile(size_schema["pattern"].removesuffix("$") + "\\Z")
    in_schema = bool(ecma.search(size)) and len(size) <= size_schema["maxLength"]
    accepted = ImageGenerationRequest(data={"model": "m", "prompt": "p", "size": size}).is_valid()
    assert accepted == in_schema


# ---------------------------------------------------------------- media

def test_a_media_file_deleted_after_it_was_located_is_a_404_not_a_500(client, monkeypatch):
    name = media.save(b"\x89PNG\r\n\x1a\nfake", kind="images", extension="png")
    located = media.locate

    def purged_right_after(found_name):
        found = located(found_name)
        (media.root() / found_name).unlink()  # purge_media, between locating and opening
        return found

    monkeypatch.setattr(media, "locate", purged_right_after)
    response = client.get(f"/media/{name}")
    assert response.status_code == 404
    assert json.loads(response.content)["error"]["code"] == "media_not_found"


def test_a_media_file_deleted_while_it_is_served_is_still_sent_whole(client):
    name = media.save(b"\x89PNG\r\n\x1a\n" + b"x" * 100_000, kind="images", extension="png")
    response = client.get(f"/media/{name}")
    (media.root() / name).unlink()  # purged after the file was opened: the open handle still reads it
    assert response.status_code == 200
    assert len(b"".join(response.streaming_content)) == 100_008
