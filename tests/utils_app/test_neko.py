import pytest
import requests
import responses as responses_lib

pytestmark = pytest.mark.django_db

NEKO = "https://neko.test/api/v2/neko"


@pytest.fixture
def upstream(settings):
    settings.NEKO_API_URL = NEKO
    with responses_lib.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


def error_of(response, status):
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    return body["error"]


def test_an_image_comes_with_its_artist_and_source(client, upstream):
    upstream.get(NEKO, json={"results": [{
        "artist_href": "https://art.test/@mimi", "artist_name": "Mimi",
        "source_url": "https://art.test/works/1", "url": "https://img.test/neko/0001.png"}]})
    response = client.get("/v1/neko")
    assert response.status_code == 200
    assert response.json() == {"url": "https://img.test/neko/0001.png", "artist": "Mimi",
                               "artist_url": "https://art.test/@mimi", "source": "https://art.test/works/1"}


def test_an_upstream_that_gives_only_a_url_is_fine(client, upstream):
    upstream.get(NEKO, json={"url": "https://img.test/neko/0002.jpg"})
    assert client.get("/v1/neko").json() == {"url": "https://img.test/neko/0002.jpg", "artist": None,
                                             "artist_url": None, "source": None}


def test_each_answer_is_a_random_pick_from_the_cached_pool(client, upstream):
    pool = [{"url": f"https://img.test/neko/{n}.png"} for n in range(20)]
    upstream.get(NEKO, json={"results": pool})
    seen = {client.get("/v1/neko").json()["url"] for _ in range(15)}
    assert len(upstream.calls) == 1
    assert len(seen) > 1
    assert seen <= {item["url"] for item in pool}


def test_links_that_are_not_http_are_dropped(client, upstream):
    upstream.get(NEKO, json={"results": [
        {"url": "javascript:alert(1)"},
        {"url": "https://img.test/ok.png", "artist_href": "javascript:alert(2)", "source_url": "data:x"},
    ]})
    assert client.get("/v1/neko").json() == {"url": "https://img.test/ok.png", "artist": None,
                                             "artist_url": None, "source": None}


@pytest.mark.parametrize("answer", [
    {"status": 500, "body": "down"},
    {"status": 404, "json": {"message": "no"}},
    {"status": 200, "body": "<html>not json</html>"},
    {"status": 200, "json": {"results": []}},
    {"status": 200, "json": {"results": [{"url": "ftp://img.test/x.png"}]}},
    {"status": 200, "json": ["https://img.test/x.png"]},
    {"body": requests.ConnectionError("refused")},
])
def test_an_upstream_that_is_down_or_broken_is_a_502(client, upstream, answer):
    upstream.get(NEKO, **answer)
    error = error_of(client.get("/v1/neko"), 502)
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_unavailable")
    assert "neko.test" not in error["message"]


def test_a_slow_upstream_is_a_504(client, upstream):
    upstream.get(NEKO, body=requests.ReadTimeout("slow"))
    error = error_of(client.get("/v1/neko"), 504)
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_timeout")


def test_failures_are_not_cached(client, upstream):
    upstream.get(NEKO, status=503)
    upstream.get(NEKO, json={"url": "https://img.test/back.png"})
    assert client.get("/v1/neko").status_code == 502
    assert client.get("/v1/neko").json()["url"] == "https://img.test/back.png"
