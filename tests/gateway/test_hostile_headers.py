"""Hostile headers, query strings and path parts on every route: valid requests of each route, spoiled one
header, query parameter or path parameter at a time by a seeded generator, never earn a 5xx, a stack trace,
an error in another API's shape, an echoed header line, or a credit lost (CONTRACT sections 4 and 5).

The bodies are the hostile-bodies sweep's business (test_hostile_bodies.py); here every body is valid and
only what a client sends beside it is spoiled. The test client's address is a trusted proxy, so a spoiled
X-Forwarded-For is the client's address as the limits and the summary line see it. A route of the URL
configuration outside the staff site that the sweep does not call fails a test until it is added to the calls
or to NOT_SWEPT with its reason.
"""
import ipaddress
import json
import logging
import random
from dataclasses import dataclass, field, replace
from urllib.parse import quote, unquote

import pytest
from django.test import Client
from django.urls import Resolver404, URLPattern, URLResolver, get_resolver, resolve

from gateway import media
from keys.ledger import mismatches
from models_catalog.models import Deployment
from tests.gateway.conftest import ANTHROPIC, GOOGLE, OPENAI, credits_of, in_error_shape

pytestmark = pytest.mark.django_db

HTML = "html"

# What a client may put in one header, query parameter or path part.
VALUES = ("", " ", "x" * 10_000, "a\x00b", "x\r\nX-Injected: 1", "\u202e", "café", "%", "%zz", "../../etc",
          "1e999", "-1", "0", "99999999999999999999", "null", "[]")
# Headers every request may carry, besides the ones its route reads.
COMMON_HEADERS = ("Idempotency-Key", "X-Request-Id", "Origin", "Content-Type", "Accept", "X-Forwarded-For",
                  "User-Agent", "Authorization", "X-Api-Key", "X-Goog-Api-Key", "Anthropic-Beta",
                  "Anthropic-Version", "Upgrade")
# Headers every route's answer or summary line carries something of: every value, on every route.
EVERY_VALUE = ("X-Request-Id", "X-Forwarded-For")
DUPLICATE = object()  # the value sent twice: two header lines (joined by the server) or two query parameters


@dataclass(frozen=True)
class Call:
    """One valid request: ``path`` may hold ``{name}`` parts filled from ``parts``."""
    name: str
    method: str
    path: str
    dialect: str
    body: dict | None = None
    parts: dict = field(default_factory=dict)
    query: tuple = ()
    headers: dict = field(default_factory=dict)
    auth: str = "bearer"  # bearer, x-api-key, x-goog-api-key, key (the query), admin, staff or none

    def url(self) -> str:
        path = self.path.format(**{name: quote(value, safe="") for name, value in self.parts.items()})
        if not self.query:
            return path
        return path + "?" + "&".join(f"{quote(name, safe='')}={quote(value, safe='')}" for name, value in self.query)


def calls(*, response_id: str, item_id: str, deployment_id: str, target_secret: str, doomed_secret: str,
          key_id: int, media_name: str) -> list[Call]:
    chat = {"model": "local-chat", "messages": [{"role": "user", "content": "Hello"}]}
    messages = {"model": "local-chat", "max_tokens": 16, "messages": [{"role": "user", "content": "Hello"}]}
    anthropic = {"anthropic-version": "2023-06-01", "anthropic-beta": "tools-2024-04-04"}
    gemini = {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]}
    return [
        Call("chat", "post", "/v1/chat/completions", OPENAI, chat, headers={"Idempotency-Key": "once"}),
        Call("chat-stream", "post", "/v1/chat/completions", OPENAI, {**chat, "stream": True}),
        Call("embeddings", "post", "/v1/embeddings", OPENAI, {"model": "local-embedding", "input": "Hello"}),
        Call("image", "post", "/v1/images/generations", OPENAI,
             {"model": "local-image", "prompt": "a fox", "size": "64x64"}),
        Call("speech", "post", "/v1/audio/speech", OPENAI,
             {"model": "local-speech", "input": "Hello", "voice": "alloy"}, headers={"Accept": "audio/wav"}),
        Call("messages", "post", "/v1/messages", ANTHROPIC, messages, headers=anthropic, auth="x-api-key"),
        Call("count-tokens", "post", "/v1/messages/count_tokens", ANTHROPIC, messages, headers=anthropic,
             auth="x-api-key"),
        Call("responses", "post", "/v1/responses", OPENAI, {"model": "local-chat", "input": "Hello"}),
        Call("responses-count", "post", "/v1/responses/input_tokens", OPENAI, {"model": "local-chat", "input": "Hi"}),
        Call("response", "get", "/v1/responses/{id}", OPENAI, parts={"id": response_id}),
        Call("responses-compact", "post", "/v1/responses/compact", OPENAI, {"model": "local-chat", "input": []}),
        Call("response-items", "get", "/v1/responses/{id}/input_items", OPENAI, parts={"id": response_id},
             query=(("limit", "10"), ("order", "asc"), ("after", item_id))),
        Call("gemini", "post", "/{version}/models/{model}:{method}", GOOGLE, gemini,
             parts={"version": "v1beta", "model": "local-chat", "method": "generateContent"},
             auth="x-goog-api-key"),
        Call("gemini-stream", "post", "/{version}/models/{model}:{method}", GOOGLE, gemini,
             parts={"version": "v1beta", "model": "local-chat", "method": "streamGenerateContent"},
             query=(("alt", "sse"), ("key", "{secret}")), auth="key"),
        Call("gemini-count", "post", "/{version}/models/{model}:{method}", GOOGLE, gemini,
             parts={"version": "v1beta", "model": "local-chat", "method": "countTokens"}, auth="x-goog-api-key"),
        Call("gemini-models", "get", "/v1beta/models", GOOGLE, auth="x-goog-api-key"),
        Call("gemini-model", "get", "/v1beta/models/{model}", GOOGLE, parts={"model": "local-chat"},
             auth="x-goog-api-key"),
        Call("models", "get", "/v1/models", OPENAI, query=(("web-view", "true"),)),
        Call("model", "get", "/v1/models/{model}", OPENAI, parts={"model": "local-chat"}),
        Call("statistic-key", "get", "/v1/statistic/key", OPENAI),
        Call("statistic-global", "get", "/v1/statistic/global", OPENAI),
        Call("facts", "get", "/utils/facts", OPENAI, auth="none"),
        Call("cors-test", "get", "/v1/chat/cors-test", OPENAI, auth="none",
             headers={"Origin": "https://example.com"}),
        Call("health", "get", "/health", OPENAI, auth="none"),
        Call("update-key", "post", "/admin/update-key", OPENAI, {"key": target_secret, "update": {"rpm": 50}},
             auth="admin"),
        Call("revoke-key", "post", "/admin/revoke-key", OPENAI, {"key": doomed_secret}, auth="admin"),
        Call("deployments", "get", "/admin/deployments", OPENAI, query=(("model", "local-chat"),), auth="admin"),
        Call("disable", "post", "/admin/deployments/{id}/disable", OPENAI, {"reason": "sweep"},
             parts={"id": deployment_id}, auth="admin"),
        Call("enable", "post", "/admin/deployments/{id}/enable", OPENAI, {}, parts={"id": deployment_id},
             auth="admin"),
        Call("response-delete", "delete", "/v1/responses/{id}", OPENAI, parts={"id": response_id}),
        Call("media", "get", "/media/{name}", OPENAI, parts={"name": media_name}, auth="none"),
        Call("landing", "get", "/", HTML, auth="none"),
        Call("docs", "get", "/docs", HTML, auth="none"),
        Call("openapi", "get", "/openapi.json", OPENAI, auth="none"),
        Call("benchmark", "get", "/benchmark", OPENAI, auth="none"),
        Call("favicon", "get", "/favicon.svg", HTML, auth="none"),
        Call("staff-deployments", "get", "/admin/models_catalog/deployment/", HTML,
             query=(("model", "local-chat"),), auth="staff"),
        Call("staff-dashboard", "get", "/admin/models_catalog/usageevent/dashboard/", HTML,
             query=(("days", "30"),), auth="staff"),
        Call("staff-keys", "get", "/admin/keys/apikey/", HTML, query=(("q", "a"), ("o", "1"), ("p", "1")),
             auth="staff"),
        Call("staff-key", "get", "/admin/keys/apikey/{id}/change/", HTML, parts={"id": str(key_id)}, auth="staff"),
    ]


def spoiled(call: Call, rng: random.Random):
    """(label, call) for each spoiling of one header, query parameter or path part of ``call``."""
    def values():
        return [*VALUES, DUPLICATE]

    for name in sorted(set(COMMON_HEADERS) | set(call.headers)):
        # Every value for the headers the route reads itself, a seeded few for the rest (the sweep's time).
        for value in values() if name in call.headers or name in EVERY_VALUE else rng.sample(values(), 4):
            label = f"header {name}={value!r}"[:80]
            yield label, replace(call, headers={**call.headers, name: value})
    for index, (name, original) in enumerate(call.query):
        for value in values():
            query = list(call.query)
            if value is DUPLICATE:
                query.append((name, original))
            else:
                query[index] = (name, value)
            yield f"query {name}={value!r}"[:80], replace(call, query=tuple(query))
    for name in ("alt", "key", "limit", "after", "order", "web-view", "model"):
        if all(name != present for present, _ in call.query):
            value = rng.choice(VALUES)
            yield f"query + {name}={value!r}"[:80], replace(call, query=(*call.query, (name, value)))
    for name, original in call.parts.items():
        for value in values():
            part = f"{original}/{original}" if value is DUPLICATE else value
            yield f"path {name}={value!r}"[:80], replace(call, parts={**call.parts, name: part})


def wsgi_headers(call: Call, secret: str) -> dict:
    """The call's headers as a WSGI server hands them on: one latin-1 string per header, repeated lines joined."""
    headers = dict(call.headers)
    if call.auth in ("bearer", "admin"):
        headers.setdefault("Authorization", f"Bearer {secret}")
    elif call.auth in ("x-api-key", "x-goog-api-key"):
        headers.setdefault(call.auth.title(), secret)
    meta = {}
    for name, value in headers.items():
        if value is DUPLICATE:
            original = call.headers.get(name) or (f"Bearer {secret}" if name == "Authorization" else secret)
            value = f"{original},{original}"
        key = name.upper().replace("-", "_")
        meta[key if key in ("CONTENT_TYPE",) else f"HTTP_{key}"] = value.encode("utf-8").decode("latin-1")
    return meta


def send(client: Client, call: Call, secret: str):
    url = call.url().replace(quote("{secret}", safe=""), secret)
    meta = wsgi_headers(call, secret)
    content_type = meta.pop("CONTENT_TYPE", "application/json")
    data = json.dumps(call.body) if call.body is not None else None
    kwargs = {"content_type": content_type} if call.method in ("post", "delete") else {}
    response = getattr(client, call.method)(url, data, **kwargs, **meta) if data is not None \
        else getattr(client, call.method)(url, **meta)
    content = b"".join(response.streaming_content) if response.streaming else response.content
    return response, content


def defects(call: Call, response, content: bytes) -> str | None:
    status = response.status_code
    path = call.url().partition("?")[0]
    if status == 404 and call.dialect == GOOGLE and not _routed(path) \
            and not response.wsgi_request.path.startswith("/v1beta/"):
        # A path no route takes (a line break in the model, an empty version) is the service's own JSON 404
        # outside v1beta/, where only Google's API lives: it has no route to tell it which API was meant.
        call = replace(call, dialect=OPENAI)
    if status >= 500 and status not in (502, 503, 504):
        return f"{status}: {content[:300]!r}"
    if b"Traceback" in content or status >= 400 and b"internal_error" in content:
        return f"{status} internal: {content[:300]!r}"
    if any(name.lower() == "x-injected" for name in response.headers) \
            or any("\n" in value or "\r" in value for value in response.headers.values()):
        return f"{status} with an injected header: {dict(response.headers)}"
    if status >= 400 and call.dialect != HTML and "json" in response.get("Content-Type", ""):
        if not in_error_shape(call.dialect, status, json.loads(content)):
            return f"{status} in another shape: {content[:300]!r}"
    elif status >= 400 and call.dialect != HTML:
        return f"{status} not JSON: {content[:300]!r}"
    return None


def _routed(path: str) -> bool:
    try:
        resolve(unquote(path))
    except Resolver404:
        return False
    return True


@pytest.fixture
def world(seeded, make_key, django_user_model, clock, settings, caplog):
    """The keys, a stored response, a deployment and a staff session the calls need; the test client's address
    is a trusted proxy, so X-Forwarded-For names the client as behind a proxy (docs/hardening.md)."""
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("127.0.0.1/32")]
    caplog.set_level(logging.INFO)
    key, secret = make_key(tier="premium", credits=10**6, max_credits=10**6, rpm=1000, rph=10_000)
    admin, admin_secret = make_key(tier="special", credits=1000, is_admin=True, rpm=1000, rph=10_000)
    target, target_secret = make_key(tier="free", credits=10)
    _, doomed_secret = make_key(tier="free", credits=10)
    client = Client(raise_request_exception=False)

    def stored_response() -> str:
        answer = client.post("/v1/responses", json.dumps({"model": "local-chat", "input": "Hello", "store": True}),
                             content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}")
        assert answer.status_code == 200, answer.content
        return answer.json()["id"]

    response_id = stored_response()
    items = client.get(f"/v1/responses/{response_id}/input_items", HTTP_AUTHORIZATION=f"Bearer {secret}").json()
    staff = Client(raise_request_exception=False)
    staff.force_login(django_user_model.objects.create_superuser("sweeper", "s@example.com",
                                                                 "a long staff passphrase"))
    deployment = Deployment.objects.order_by("id").first()
    media_name = media.save(b"\x89PNG" + b"0" * 60, kind="images", extension="png")
    return {"stored_response": stored_response, "caplog": caplog, "clock": clock, "key": key, "secret": secret,
            "admin_secret": admin_secret, "client": client, "staff": staff,
            "calls": calls(response_id=response_id, item_id=items["data"][0]["id"], deployment_id=str(deployment.id),
                           target_secret=target_secret, doomed_secret=doomed_secret, key_id=target.id,
                           media_name=media_name)}


def sweep(world, seed=20261129) -> tuple[int, list[str]]:
    rng = random.Random(seed)
    key = world["key"]
    found: list[str] = []
    sent = 0
    for call in world["calls"]:
        for label, mutant in [("valid", call), *spoiled(call, rng)]:
            if sent % 50 == 49:  # the next hour, before the keys' or an address's requests a minute run out
                world["clock"].advance(3600)
            logged = len(world["caplog"].records)
            if call.method == "delete" and mutant.parts == call.parts:  # each deletion has a response to delete
                mutant = replace(mutant, parts={"id": world["stored_response"]()})
            client = world["staff"] if call.auth == "staff" else world["client"]
            secret = world["admin_secret"] if call.auth == "admin" else world["secret"]
            before = credits_of(key)
            response, content = send(client, mutant, secret)
            sent += 1
            defect = defects(mutant, response, content)
            if response.status_code >= 400 and credits_of(key) != before:
                defect = f"{response.status_code} cost {before - credits_of(key)} credit(s)"
            forged = [record.getMessage() for record in world["caplog"].records[logged:]
                      if "\n" in record.getMessage() or "\r" in record.getMessage()]
            if forged and not defect:
                defect = f"a log line broken in two: {forged[0][:300]!r}"
            if defect:
                found.append(f"{call.name} {label}: {defect}")
    return sent, found


# Routes of the URL configuration the sweep leaves out, and why.
NOT_SWEPT = {
    "create-key": "each valid call makes a key; its body is the hostile-bodies sweep's and the admin API tests'",
    "neko": "its answer comes from an upstream the tests have not got",
    "community-invites": "its answer comes from an upstream the tests have not got",
    "community-guilds": "its answer comes from an upstream the tests have not got",
    "community-user": "its answer comes from an upstream the tests have not got",
    "metrics": "off unless configured (tests/utils_app/test_metrics.py)",
    "favicon": "the same view as favicon.svg",
    "docs-slash": "a redirect to /docs",
}


STAFF_PREFIXES = ("admin/", "admin/models_catalog/deployment/")  # the staff site: four of its pages are swept


def route_names(patterns=None):
    """The names of the URL configuration's routes outside the staff site (admin.site and its pages)."""
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            if entry.app_name != "admin" and str(entry.pattern) not in STAFF_PREFIXES:
                yield from route_names(entry.url_patterns)
        elif isinstance(entry, URLPattern) and entry.name:
            yield entry.name.removeprefix("admin-")


def test_the_sweep_calls_every_route_outside_the_staff_site(world):
    swept = set()
    for call in world["calls"]:
        match = resolve(unquote(call.url().partition("?")[0]).replace("{secret}", ""))
        swept.add(match.url_name.removeprefix("admin-"))
    assert set(route_names()) - swept - set(NOT_SWEPT) == set()


def test_every_valid_call_of_the_sweep_is_answered(world):
    for call in world["calls"]:
        client = world["staff"] if call.auth == "staff" else world["client"]
        response, content = send(client, call, world["admin_secret"] if call.auth == "admin" else world["secret"])
        # The compact endpoint is not served: its valid call is its 404.
        assert response.status_code < 400 or (call.name, response.status_code) == ("responses-compact", 404), \
            (call.name, content[:300])


@pytest.mark.slow  # about 20 s on two cores
def test_hostile_headers_queries_and_paths_earn_no_5xx_and_cost_nothing_lost(world):
    sent, found = sweep(world)
    assert not found, f"{len(found)} of {sent}:\n" + "\n".join(found[:80])
    assert mismatches() == []
