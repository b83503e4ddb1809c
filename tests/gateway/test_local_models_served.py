"""The local models' heavy work under a gevent worker: the worker's other requests are still answered."""
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from tests.gateway.conftest import gunicorn

# URLs, not the pictures inline: the test measures the drawing, not moving 7 MB answers about.
HEAVY = {"model": "local-image", "prompt": "a lighthouse in a storm", "size": "4096x4096", "n": 10,
         "response_format": "url"}


@pytest.mark.postgres
@pytest.mark.served
def test_four_of_the_largest_image_requests_leave_health_answering_within_a_second(transactional_db, seeded,
                                                                                  make_key, tmp_path):
    key, secret = make_key(tier="premium", credits=100, max_credits=100, rpm=1000)
    ApiKey.objects.filter(pk=key.pk).update(max_concurrent=10)

    with gunicorn(tmp_path / "server", env={"GUNICORN_WORKER_CLASS": "gevent"}) as base:
        def generate(_):
            return requests.post(f"{base}/v1/images/generations", json=HEAVY, timeout=300,
                                 headers={"Authorization": f"Bearer {secret}"})

        with ThreadPoolExecutor(4) as pool:
            heavy = [pool.submit(generate, number) for number in range(4)]
            time.sleep(0.5)  # all four are rendering
            waits = []
            while not all(future.done() for future in heavy):
                started = time.monotonic()
                assert requests.get(f"{base}/health", timeout=60).status_code == 200
                waits.append(time.monotonic() - started)
                time.sleep(0.1)
            answers = [future.result() for future in heavy]

    assert [answer.status_code for answer in answers] == [200] * 4
    assert all(len(answer.json()["data"]) == 10 for answer in answers)
    assert max(waits) < 1.0, f"/health took up to {max(waits):.2f} s ({len(waits)} asks)"
    assert len(waits) >= 3  # the images took a while: /health was asked while they were drawn
    charges = LedgerEntry.objects.filter(key=key, kind="charge")
    assert sorted(charges.values_list("status", "amount")) == [("completed", -20)] * 4
    assert mismatches() == []
