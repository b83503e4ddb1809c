"""The faults of the suite with token-priced models (CONTRACT section 12): every hold settled, refunded or swept,
every settled price its row's own, every balance its ledger.

The local models and the faulty upstream's model are priced by the token here, so that each request holds
more than it is charged and its settlement gives the rest back. The per-request check of the other fault
tests (assert_credits_add_up, prices from the catalog's cost) does not apply to them: ``manage.py
reconcile`` proves instead that every balance is the sum of its ledger and every completed charge is
its price from its own tokens and terms, after the sweeper refunded whatever a fault left pending.
"""
import os
import re
import signal
import time

import pytest

from tests.faults.conftest import (
    AFTER,
    BEFORE,
    CHAT,
    EMBEDDING,
    FAULTY_STREAM,
    RECOVERY,
    WORKERS,
    Fault,
    Lane,
    Load,
    assert_clients_served,
    assert_health,
    assert_reconciled,
    database_refusal,
    local_lanes,
    report,
    seed_faulty_model,
    serve,
)
from tests.faults.test_upstream_and_worker_faults import busiest_worker, clients_of, cut_by_the_kill
from tests.gateway.conftest import wait_for

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.redis]

# Credits per million tokens: a hold of a few credits for "Hello" and its 2,000-token cap, a price of two.
PRICED = ("UPDATE models_catalog_aimodel SET pricing_input = 1000, pricing_output = 1000, max_output_tokens = 2000 "
          "WHERE type IN ('chat', 'embedding')")


def price_by_the_token(stack) -> None:
    with stack.postgres.connect() as connection:
        assert connection.execute(PRICED).rowcount >= 3


def token_priced_charges(stack) -> tuple[int, int]:
    """(completed token-priced charges, of them those whose settlement gave part of the hold back)."""
    with stack.postgres.connect() as connection:
        return connection.execute(
            "SELECT count(*), count(*) FILTER (WHERE -amount < held) FROM keys_ledgerentry "
            "WHERE kind = 'charge' AND status = 'completed' AND price_input IS NOT NULL").fetchone()


def test_a_postgres_restart_with_token_prices_leaves_every_hold_settled_or_refunded(stack):
    price_by_the_token(stack)
    with serve(stack) as base, Load(base, local_lanes(stack.secrets)) as load:
        time.sleep(BEFORE)
        fault = Fault("postgres restart (pg_ctl restart -m fast), token-priced models", start=load.now())
        stack.postgres.restart()
        fault.end = load.now()
        time.sleep(RECOVERY + AFTER)

    swept = stack.manage("settle_stale", "--older-than", "0").stdout.strip()
    reconciled = stack.reconcile()
    settled, given_back = token_priced_charges(stack)
    fault.notes.append(f"settle_stale: {swept}; token-priced charges completed {settled}, {given_back} gave back")
    report(load, fault, reconciled[1])
    assert_clients_served(load, fault, stack, tolerated=database_refusal)
    assert_health(load, fault, stack, database_down=True)
    assert settled and given_back  # the chats held more than their price and got the rest back
    assert stack.pending_charges() == 0
    assert_reconciled(reconciled, stack)


def test_a_worker_killed_mid_stream_with_token_prices_leaves_a_ledger_that_reconciles(stack, chat_upstream):
    lanes = ([Lane(secret, (CHAT, EMBEDDING)) for secret in stack.secrets[:4]]
             + [Lane(secret, (FAULTY_STREAM,)) for secret in stack.secrets[4:8]])
    env = seed_faulty_model(stack, chat_upstream)
    price_by_the_token(stack)
    with serve(stack, **env) as base, Load(base, lanes) as load:
        time.sleep(BEFORE)
        victim, streams = busiest_worker(base, chat_upstream)
        fault = Fault(f"gunicorn worker SIGKILLed with {streams} token-priced stream(s) in flight",
                      start=load.now())
        clients = clients_of(victim, base)
        os.kill(victim, signal.SIGKILL)
        replaced = wait_for(lambda: victim not in base.worker_pids() and len(base.worker_pids()) == WORKERS,
                            timeout=30)
        fault.end = load.now()
        time.sleep(RECOVERY + AFTER)

    pending = stack.pending_charges()
    swept = stack.manage("settle_stale", "--older-than", "0").stdout.strip()
    abandoned = int(re.search(r"abandoned and refunded (\d+) charge", swept).group(1))
    reconciled = stack.reconcile()
    cut = [result for result in load.results if cut_by_the_kill(result)]
    fault.notes.append(f"cut {len(cut)}; pending after the load {pending}; settle_stale: {swept}")
    report(load, fault, reconciled[1])
    assert streams and replaced
    assert_clients_served(load, fault, stack, tolerated=cut_by_the_kill)
    assert len({result.lane for result in cut}) <= clients
    assert abandoned == pending and stack.pending_charges() == 0
    assert token_priced_charges(stack)[0] > 0
    assert_reconciled(reconciled, stack)
