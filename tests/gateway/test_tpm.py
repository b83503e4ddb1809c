"""Tokens per minute (CONTRACT section 12): counted in the key row by the settlement, refused by the charge.

The count lives in the database, not in the limits' Redis round trip (docs/pricing.md): a request's
tokens are known only at its settlement, which writes the key row anyway, so every worker and host
sees the same count at no extra round trip.
"""
from datetime import datetime, timezone

import pytest
import requests

from keys.ledger import mismatches
from keys.models import ApiKey
from tests.gateway.conftest import LOCAL_BODIES, assert_error, chat_completion, gunicorn, post
from tests.gateway.test_token_prices import HELLO, PATH


def limited(make_key, tpm: int):
    key, secret = make_key(credits=1000, max_credits=1000, rpm=1000, rph=10000)
    ApiKey.objects.filter(pk=key.pk).update(tpm=tpm)
    return key, secret


@pytest.mark.django_db
def test_a_key_past_its_tokens_per_minute_gets_429_tpm_until_the_minute_ends(client, fake_models, upstream,
                                                                            make_key, clock):
    clock.set(datetime(2026, 3, 4, 15, 20, 15, tzinfo=timezone.utc).timestamp())
    key, secret = limited(make_key, tpm=20)
    upstream.json("/chat/completions", chat_completion(prompt_tokens=7, completion_tokens=4))  # 11 tokens
    body = {"model": "fake-chat", "messages": HELLO}
    first = post(client, PATH, body, secret)
    assert (first["X-RateLimit-Limit-Tokens"], first["X-RateLimit-Remaining-Tokens"]) == ("20", "9")
    second = post(client, PATH, body, secret)  # 11 settled, under 20: admitted, and takes the minute past it
    assert (second.status_code, second["X-RateLimit-Remaining-Tokens"]) == (200, "0")
    refused = post(client, PATH, body, secret)
    assert_error(refused, 429, "rate_limit_exceeded", "rate_limit_error", param="tpm")
    assert refused["Retry-After"] == "45"  # the minute's end
    assert (refused["X-RateLimit-Limit-Tokens"], refused["X-RateLimit-Remaining-Tokens"]) == ("20", "0")
    assert len(upstream.posts()) == 2
    key.refresh_from_db()
    assert (key.tpm_used, key.credits) == (22, 998)
    clock.advance(45)  # the next minute counts from 0
    again = post(client, PATH, body, secret)
    assert (again.status_code, again["X-RateLimit-Remaining-Tokens"]) == (200, "9")
    assert mismatches() == []


@pytest.mark.django_db
def test_a_key_without_tpm_has_no_token_headers(client, fake_models, upstream, free_key):
    _, secret = free_key
    upstream.json("/chat/completions", chat_completion())
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO}, secret)
    assert response.status_code == 200 and "X-RateLimit-Limit-Tokens" not in response


@pytest.mark.postgres
@pytest.mark.served
def test_the_tokens_of_one_worker_refuse_the_next_request_at_another(transactional_db, seeded, make_key, tmp_path):
    key, secret = limited(make_key, tpm=1)
    path, body = LOCAL_BODIES["chat"]
    headers = {"Authorization": f"Bearer {secret}"}
    with gunicorn(tmp_path / "server", workers=2, threads=2) as base:
        # Fresh connections land on either worker; the served processes read the real clock, so a minute
        # may turn between two requests: then the next one is admitted again, and the loop goes on.
        answers = []
        for _ in range(12):
            answer = requests.post(base + path, json=body, headers=headers, timeout=30)
            answers.append(answer)
            if answer.status_code == 429:
                break
    assert answers[0].status_code == 200
    assert answers[0].headers["X-RateLimit-Limit-Tokens"] == "1"
    refused = answers[-1]
    assert refused.status_code == 429, [answer.status_code for answer in answers]
    assert refused.json()["error"]["param"] == "tpm"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["X-RateLimit-Remaining-Tokens"] == "0"
    assert mismatches() == []
