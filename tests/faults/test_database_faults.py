"""PostgreSQL going away under load: clients get 503s they may retry, never a hang, a 500 or a lost credit."""
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
    database_refusal,
    local_lanes,
    report,
    serve,
)

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.redis]

DOWN_SECONDS = 5


def judge(load: Load, fault: Fault, stack) -> None:
    """While the database was away only 503s; health said so; every credit accounted for after."""
    reconciled = stack.reconcile()
    fault.notes.append(f"charges left pending {stack.pending_charges()}")
    report(load, fault, reconciled[1])
    assert_clients_served(load, fault, stack, tolerated=database_refusal)
    assert_health(load, fault, stack, database_down=True)
    assert_credits_add_up(load, stack)
    assert_reconciled(reconciled, stack)


def test_a_postgres_restart_costs_clients_at_most_503s_and_no_credit(stack):
    with serve(stack) as base, Load(base, local_lanes(stack.secrets)) as load:
        time.sleep(BEFORE)
        fault = Fault("postgres restart (pg_ctl restart -m fast)", start=load.now())
        stack.postgres.restart()
        fault.end = load.now()
        time.sleep(RECOVERY + AFTER)

    judge(load, fault, stack)


def test_postgres_down_for_five_seconds_is_503s_with_retry_after_then_full_service(stack):
    with serve(stack) as base, Load(base, local_lanes(stack.secrets)) as load:
        time.sleep(BEFORE)
        fault = Fault(f"postgres stopped for {DOWN_SECONDS}s", start=load.now())
        stack.postgres.stop()
        stopped = load.now()
        time.sleep(DOWN_SECONDS)
        restarting = load.now()
        stack.postgres.start()
        fault.end, fault.down = load.now(), (stopped, restarting)
        time.sleep(RECOVERY + AFTER)

    judge(load, fault, stack)
