"""Credits under real concurrency: PostgreSQL, gunicorn processes and threads, one key."""
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from models_catalog.models import UsageEvent
from tests.gateway.conftest import LOCAL_BODIES, gunicorn

PARALLEL = 40


@pytest.mark.postgres
@pytest.mark.served
def test_forty_parallel_requests_on_credits_for_twenty_give_exactly_twenty_successes(transactional_db, seeded,
                                                                                     make_key, tmp_path):
    key, secret = make_key(credits=20, max_credits=20, rpm=1000, rph=10000)
    ApiKey.objects.filter(pk=key.pk).update(max_concurrent=PARALLEL)  # this test is about credits only
    path, body = LOCAL_BODIES["embedding"]  # costs 1 credit
    start = threading.Barrier(PARALLEL)

    # Two worker processes of 20 threads: all 40 requests are served at once, by separate
    # database connections in separate processes, so the charges really race.
    with gunicorn(tmp_path / "server", workers=2, threads=PARALLEL // 2) as base:
        def call(_):
            start.wait(timeout=30)
            return requests.post(base + path, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=60)

        with ThreadPoolExecutor(PARALLEL) as pool:
            responses = list(pool.map(call, range(PARALLEL)))

    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200] * 20 + [402] * 20
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (0, 0)
    assert UsageEvent.objects.filter(key=key, success=True).count() == 20
    # Every charge was settled, and the balance is the sum of its ledger.
    assert list(LedgerEntry.objects.filter(key=key, kind="charge").values_list("status", flat=True)) == \
        ["completed"] * 20
    assert mismatches() == []
    # Every success saw a distinct balance: no credit was spent twice.
    remaining = sorted(int(r.headers["X-Remaining-Credits"]) for r in responses if r.status_code == 200)
    assert remaining == list(range(20))
