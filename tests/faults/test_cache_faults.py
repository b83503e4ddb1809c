"""Redis dead or hung under load: every request is still served, limits fail open, credits stay exact."""
import statistics
import time

import pytest

from tests.faults.conftest import (
    AFTER,
    BEFORE,
    RECOVERY,
    Fault,
    Load,
    assert_clients_served,
    assert_credits_add_up,
    assert_health,
    assert_reconciled,
    local_lanes,
    report,
    serve,
)

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.redis]

DOWN_SECONDS = 5
REDIS_TIMEOUT = 0.25  # seconds a Redis call may take before the gateway gives up on it (the default, set explicitly)


def median_latency(load: Load, start: float, end: float) -> float:
    return statistics.median(result.seconds for result in load.results if start <= result.started < end)


def judge(load: Load, fault: Fault, stack) -> None:
    reconciled = stack.reconcile()
    before, down = median_latency(load, 0, fault.start), median_latency(load, *fault.down)
    fault.notes.append(f"median request {before:.3f}s before, {down:.3f}s while the cache was down")
    report(load, fault, reconciled[1])
    assert_clients_served(load, fault, stack)  # nothing tolerated: the contract says every request is served
    # The contract: each request delayed by at most REDIS_TIMEOUT (one limit count), not by a hang;
    # twice that leaves room for a busy machine.
    assert down <= before + 2 * REDIS_TIMEOUT, f"requests waited on the cache: median {down:.3f}s"
    assert_health(load, fault, stack, cache_down=True)
    assert_credits_add_up(load, stack)
    assert_reconciled(reconciled, stack)


def test_redis_killed_for_five_seconds_leaves_every_request_served_and_health_degraded(stack):
    with serve(stack, REDIS_TIMEOUT=str(REDIS_TIMEOUT)) as base, Load(base, local_lanes(stack.secrets)) as load:
        time.sleep(BEFORE)
        fault = Fault(f"redis killed (SIGKILL) for {DOWN_SECONDS}s", start=load.now())
        stack.redis.kill()
        time.sleep(DOWN_SECONDS)
        restarting = load.now()
        stack.redis.start()
        fault.end, fault.down = load.now(), (fault.start, restarting)
        time.sleep(RECOVERY + AFTER)

    judge(load, fault, stack)


def test_a_hung_redis_delays_requests_by_its_timeout_but_refuses_none(stack):
    with serve(stack, REDIS_TIMEOUT=str(REDIS_TIMEOUT)) as base, Load(base, local_lanes(stack.secrets)) as load:
        time.sleep(BEFORE)
        fault = Fault(f"redis hung (SIGSTOP) for {DOWN_SECONDS}s", start=load.now())
        stack.redis.pause()
        time.sleep(DOWN_SECONDS)
        fault.down = (fault.start, load.now())
        stack.redis.resume()
        fault.end = load.now()
        time.sleep(RECOVERY + AFTER)

    judge(load, fault, stack)
