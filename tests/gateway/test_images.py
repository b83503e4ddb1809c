"""POST /v1/images/generations: validation, cost * n, stored URLs and inline base64."""
import base64
import struct
from urllib.parse import urlsplit

import pytest

from keys.models import ApiKey
from models_catalog import catalog
from models_catalog.models import Provider, UsageEvent
from tests.gateway.conftest import PNG_1X1, assert_error, post

pytestmark = pytest.mark.django_db
PATH = "/v1/images/generations"


def png_size(content: bytes) -> tuple[int, int]:
    assert content.startswith(b"\x89PNG\r\n\x1a\n")
    return struct.unpack(">II", content[16:24])


def media_path(url: str) -> str:
    return urlsplit(url).path


def test_url_results_are_stored_and_served_by_the_service(client, seeded, local_key, settings):
    key, secret = local_key
    response = post(client, PATH, {"model": "local-image", "prompt": "a red fox", "n": 2, "size": "96x64"}, secret)
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"created", "data", "remaining_credits"}
    # local-image costs 2 credits per image.
    assert body["remaining_credits"] == 96 == ApiKey.objects.get(pk=key.pk).credits
    assert response["X-Remaining-Credits"] == "96"
    assert len(body["data"]) == 2
    urls = [item["url"] for item in body["data"]]
    assert all(url.startswith("http://testserver/media/images/") and item["b64_json"] is None
               for url, item in zip(urls, body["data"]))
    assert len(set(urls)) == 2
    stored = sorted((settings.MEDIA_ROOT / "images").iterdir())
    assert len(stored) == 2
    served = client.get(media_path(urls[0]))
    assert served.status_code == 200
    assert served["Content-Type"] == "image/png"
    assert png_size(b"".join(served.streaming_content)) == (96, 64)
    event = UsageEvent.objects.get()
    assert (event.operation, event.credits_charged, event.success) == ("image", 4, True)


def test_b64_json_results_come_inline_and_nothing_is_stored(client, seeded, local_key, settings):
    _, secret = local_key
    response = post(client, PATH, {"model": "local-image", "prompt": "a fox", "size": "64x80",
                                   "response_format": "b64_json"}, secret)
    item = response.json()["data"][0]
    assert item["url"] is None
    assert png_size(base64.b64decode(item["b64_json"])) == (64, 80)
    assert not (settings.MEDIA_ROOT / "images").exists()


def test_urls_use_the_public_base_url_when_it_is_set(client, seeded, local_key, settings):
    settings.PUBLIC_BASE_URL = "https://gateway.example.com"
    _, secret = local_key
    body = post(client, PATH, {"model": "local-image", "prompt": "a fox", "size": "64x64"}, secret).json()
    url = body["data"][0]["url"]
    assert url.startswith("https://gateway.example.com/media/images/")


def test_the_default_size_is_1024_square(client, seeded, local_key):
    _, secret = local_key
    item = post(client, PATH, {"model": "local-image", "prompt": "a fox", "response_format": "b64_json"},
                secret).json()["data"][0]
    assert png_size(base64.b64decode(item["b64_json"])) == (1024, 1024)


@pytest.mark.parametrize("member, value, code", [
    ("n", 0, "invalid_value"), ("n", 11, "invalid_value"), ("n", "2", "invalid_value"),
    ("size", "1024", "invalid_value"), ("size", "63x64", "invalid_value"), ("size", "64x4097", "invalid_value"),
    ("size", " 64x64", "invalid_value"), ("size", 64, "invalid_value"),
    ("quality", "best", "invalid_value"), ("response_format", "png", "invalid_value"),
    ("style", "dreamy", "invalid_value"), ("prompt", "", "missing_field"), ("prompt", 5, "invalid_value"),
    ("user", 5, "invalid_value"),
])
def test_invalid_members_are_refused_before_any_charge(client, seeded, local_key, member, value, code):
    key, secret = local_key
    body = {"model": "local-image", "prompt": "a fox", member: value}
    assert_error(post(client, PATH, body, secret), 400, code, param=member)
    assert ApiKey.objects.get(pk=key.pk).credits == 100


@pytest.mark.parametrize("quality", ["standard", "hd", "ultra_hd", "clarity"])
def test_every_documented_quality_is_accepted(client, seeded, local_key, quality):
    _, secret = local_key
    body = {"model": "local-image", "prompt": "fox", "size": "64x64", "quality": quality, "style": "natural"}
    assert post(client, PATH, body, secret).status_code == 200


def test_upstream_url_results_are_fetched_and_handed_out_under_our_own_url(client, fake_models, upstream, free_key,
                                                                           settings):
    _, secret = free_key
    upstream.serve_file("/files/generated.png", PNG_1X1, "image/png")
    upstream.json("/images/generations", {"created": 1, "data": [
        {"url": upstream.base_url + "/files/generated.png", "revised_prompt": "a fox, detailed"}]})
    response = post(client, PATH, {"model": "fake-image", "prompt": "a fox", "size": "1024x1792"}, secret)
    assert response.status_code == 200, response.content
    item = response.json()["data"][0]
    assert item["url"].startswith("http://testserver/media/images/")
    assert upstream.base_url not in response.content.decode()
    assert item["revised_prompt"] == "a fox, detailed"
    assert b"".join(client.get(media_path(item["url"])).streaming_content) == PNG_1X1
    # Only the client's own members go upstream, under the upstream's model name.
    assert upstream.posts()[0].body == {"model": "up-image", "prompt": "a fox", "size": "1024x1792"}
    fetch = [call for call in upstream.calls if call.method == "GET"][0]
    assert "Authorization" not in fetch.headers


def test_an_upstream_b64_result_can_be_returned_as_a_url(client, fake_models, upstream, free_key):
    _, secret = free_key
    upstream.succeed_all()
    item = post(client, PATH, {"model": "fake-image", "prompt": "fox"}, secret).json()["data"][0]
    assert b"".join(client.get(media_path(item["url"])).streaming_content) == PNG_1X1


def test_an_image_url_that_cannot_be_fetched_is_an_upstream_failure_and_refunded(client, fake_models, upstream,
                                                                                  free_key):
    key, secret = free_key
    upstream.json("/images/generations", {"created": 1, "data": [{"url": f"{upstream.base_url}/files/lost.png"}]})
    response = post(client, PATH, {"model": "fake-image", "prompt": "fox"}, secret)
    assert_error(response, 502, "upstream_unavailable", "upstream_error")
    assert [call.path for call in upstream.calls] == ["/v1/images/generations", "/v1/files/lost.png"]
    assert ApiKey.objects.get(pk=key.pk).credits == 100
    assert UsageEvent.objects.get().success is False


def test_an_unknown_media_name_is_a_json_404(client):
    for path in ("/media/images/nope.png", "/media/../secret_key", "/media/images/..%2f..%2fsecret_key"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.json()["error"]["code"] in ("media_not_found", "not_found")
