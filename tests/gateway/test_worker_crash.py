"""A worker killed with streams in flight: the charges it held are refunded by the sweeper, exactly."""
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from io import StringIO

import pytest
import requests
from django.core.management import call_command

from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from tests.gateway.conftest import UPSTREAM_SECRET, Pause, chunk, gunicorn, wait_for

STREAMS = 12


@pytest.mark.postgres
@pytest.mark.served
def test_a_worker_killed_mid_stream_leaves_pending_charges_that_settle_stale_refunds(
        transactional_db, fake_models, upstream, make_key, tmp_path, monkeypatch):
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", UPSTREAM_SECRET)  # inherited by the gunicorn process
    key, secret = make_key(credits=50, max_credits=50, rpm=1000)
    # Each stream sends one event, then stays open far longer than the test lasts.
    upstream.sse("/chat/completions", [chunk("first "), Pause(60), chunk("never"), "[DONE]"])
    body = {"model": "fake-chat", "messages": [{"role": "user", "content": "Hello"}], "stream": True}

    with gunicorn(tmp_path / "server", threads=STREAMS + 2) as base:
        def stream(_):
            response = requests.post(f"{base}/v1/chat/completions", json=body, stream=True, timeout=30,
                                     headers={"Authorization": f"Bearer {secret}"})
            first = response.raw.read1(65536)
            return response, first

        with ThreadPoolExecutor(STREAMS) as pool:
            opened = list(pool.map(stream, range(STREAMS)))
        assert all(first.startswith(b"data: ") for _, first in opened)
        assert ApiKey.objects.get(pk=key.pk).in_flight == STREAMS

        [worker] = base.worker_pids()
        os.kill(worker, signal.SIGKILL)
        assert wait_for(lambda: base.worker_pids() and base.worker_pids() != [worker], timeout=30)
        for response, _ in opened:
            response.close()

    # Nobody settled them: the credits are still taken, each with its pending row.
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (50 - STREAMS, STREAMS)
    assert LedgerEntry.objects.filter(key=key, kind="charge", status="pending").count() == STREAMS
    assert mismatches() == []  # taken, but accounted for

    out = StringIO()
    call_command("settle_stale", "--older-than", "0", stdout=out)
    assert f"abandoned and refunded {STREAMS} charge(s)" in out.getvalue()
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (50, 0)
    assert LedgerEntry.objects.filter(key=key, kind="charge", status="abandoned").count() == STREAMS
    assert mismatches() == []
