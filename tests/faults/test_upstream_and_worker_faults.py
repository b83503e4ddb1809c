"""Faults on the way out and in: an upstream resetting its streams, clients leaving theirs, a worker killed.

The faulty-chat model is served by the test's own upstream (conftest.ChatUpstream),
whose streams last about a second, so they are open when a fault cuts them.
"""
import os
import re
import signal
import time
from contextlib import suppress
from pathlib import Path

import pytest

from tests.faults.conftest import (
    AFTER,
    BEFORE,
    CHAT,
    EMBEDDING,
    ERROR_EVENT_CODES,
    FAULTY_CHAT,
    FAULTY_STREAM,
    RECOVERY,
    WORKERS,
    Fault,
    Lane,
    Load,
    assert_clients_served,
    assert_credits_add_up,
    assert_health,
    assert_reconciled,
    report,
    seed_faulty_model,
    serve,
)
from tests.gateway.conftest import wait_for

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.redis]

FAULT_SECONDS = 5
UPSTREAM_CODES = {502: "upstream_unavailable", 504: "upstream_timeout"}


def upstream_failure(result) -> bool:
    """The contract's answers to a failed upstream: 502/504 before the first byte; after it,
    one error event, then [DONE]."""
    if result.status in UPSTREAM_CODES:
        return result.code == UPSTREAM_CODES[result.status]
    return result.status == 200 and result.code in UPSTREAM_CODES.values() and result.done


def cut_by_the_kill(result) -> bool:
    """What a dead worker leaves its clients: no answer, or a stream that stops short."""
    return not result.charged and (result.status == 0 or (result.status == 200 and result.code not in
                                                          ERROR_EVENT_CODES))


def test_an_upstream_resetting_streams_gets_error_events_and_charges_only_what_was_delivered(
        stack, chat_upstream):
    lanes = ([Lane(secret, (CHAT, EMBEDDING)) for secret in stack.secrets[:3]]
             + [Lane(secret, (FAULTY_CHAT,)) for secret in stack.secrets[3:5]]
             + [Lane(secret, (FAULTY_STREAM,)) for secret in stack.secrets[5:8]])
    env = seed_faulty_model(stack, chat_upstream)
    with serve(stack, **env) as base, Load(base, lanes) as load:
        time.sleep(BEFORE)
        fault = Fault(f"upstream resetting connections (TCP RST) for {FAULT_SECONDS}s", start=load.now())
        chat_upstream.resetting.set()
        time.sleep(FAULT_SECONDS)
        chat_upstream.resetting.clear()
        fault.end = load.now()
        time.sleep(RECOVERY + AFTER)

    reconciled = stack.reconcile()
    report(load, fault, reconciled[1])
    assert_clients_served(load, fault, stack, tolerated=upstream_failure)
    local = [result for result in load.results if result.lane < 3]
    assert all(result.succeeded for result in local), "the local models failed with the upstream"
    assert any(result.status == 502 for result in load.results), "no plain request met a reset"
    assert any(result.status == 200 and result.code for result in load.results), "no stream met a reset"
    assert_health(load, fault, stack)
    # 502s before the first content refunded; a stream reset after content charged (CONTRACT section 5).
    assert_credits_add_up(load, stack)
    assert stack.pending_charges() == 0
    assert_reconciled(reconciled, stack)


def test_clients_leaving_streams_close_the_upstream_and_pay_for_what_they_got(stack, chat_upstream):
    lanes = ([Lane(secret, (CHAT, EMBEDDING)) for secret in stack.secrets[:3]]
             + [Lane(secret, (FAULTY_STREAM,), hangs_up=True) for secret in stack.secrets[3:6]]
             + [Lane(secret, (FAULTY_STREAM,)) for secret in stack.secrets[6:8]])
    env = seed_faulty_model(stack, chat_upstream)
    with serve(stack, **env) as base:
        with Load(base, lanes) as load:
            time.sleep(BEFORE)
            fault = Fault(f"clients leaving streams after the first event for {FAULT_SECONDS}s", start=load.now())
            load.hang_up.set()
            time.sleep(FAULT_SECONDS)
            load.hang_up.clear()
            fault.end = load.now()
            time.sleep(RECOVERY + AFTER)
        # Counted while the gateway still runs: stopping it would close any relay left open.
        left = sum(result.hung_up for result in load.results)
        wait_for(lambda: chat_upstream.closed_early >= left, timeout=5)
        closed_early = chat_upstream.closed_early
        pending = stack.pending_charges()

    reconciled = stack.reconcile()
    fault.notes.append(f"streams left {left}, upstream streams closed early {closed_early}, pending {pending}")
    report(load, fault, reconciled[1])
    assert left, "no client left a stream"
    assert closed_early == left, "a client's departure did not close the upstream stream"
    assert pending == 0, "a stream a client left was never settled"
    assert_clients_served(load, fault, stack)
    assert_health(load, fault, stack)
    assert_credits_add_up(load, stack)  # a stream left midway is paid: the upstream did the work
    assert_reconciled(reconciled, stack)


# ---------------------------------------------------------------- a worker killed

def _established() -> list[tuple[int, int, str]]:
    """(local port, remote port, socket inode) of every established TCP connection here."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "01":
                    found.append((int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16),
                                  fields[9]))
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    return inodes


def streams_relayed_by(worker: int, upstream) -> int:
    """Streams the worker is relaying now: its connections to the upstream on which a stream is being sent."""
    inodes = _socket_inodes(worker)
    return sum(1 for local, remote, inode in _established()
               if remote == upstream.port and local in upstream.streaming and inode in inodes)


def clients_of(worker: int, base: str) -> int:
    """Client connections the worker holds: its established connections on the gateway's port."""
    port, inodes = int(base.rsplit(":", 1)[1]), _socket_inodes(worker)
    return sum(1 for local, _, inode in _established() if local == port and inode in inodes)


def busiest_worker(base, upstream) -> tuple[int, int]:
    """(pid, streams) of the worker relaying the most streams; waits a little for one to have any."""
    deadline = time.monotonic() + 10
    while True:
        counts = {pid: streams_relayed_by(pid, upstream) for pid in base.worker_pids()}
        pid, streams = max(counts.items(), key=lambda item: item[1])
        if streams or time.monotonic() > deadline:
            return pid, streams
        time.sleep(0.05)


def test_a_worker_killed_mid_stream_cuts_only_its_own_clients_and_settle_stale_refunds_them(
        stack, chat_upstream):
    lanes = ([Lane(secret, (CHAT, EMBEDDING)) for secret in stack.secrets[:4]]
             + [Lane(secret, (FAULTY_STREAM,)) for secret in stack.secrets[4:8]])
    env = seed_faulty_model(stack, chat_upstream)
    with serve(stack, **env) as base, Load(base, lanes) as load:
        time.sleep(BEFORE)
        victim, streams = busiest_worker(base, chat_upstream)
        clients = clients_of(victim, base)
        fault = Fault(f"gunicorn worker SIGKILLed with {streams} stream(s) in flight", start=load.now())
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
    cut_streams = sum(result.call.stream for result in cut)
    fault.notes.append(f"worker replaced in {fault.end - fault.start:.2f}s; cut {len(cut)} ({cut_streams} streams); "
                       f"pending after the load {pending}; settle_stale: {swept}")
    report(load, fault, reconciled[1])
    assert streams, "no worker was relaying a stream: nothing to kill mid-stream"
    assert replaced, "gunicorn did not replace the killed worker within 30 s"
    assert_clients_served(load, fault, stack, tolerated=cut_by_the_kill)
    # Clients keep their connection to one worker: only those the dead worker held lost anything.
    assert len({result.lane for result in cut}) <= clients, f"the worker held {clients} client(s)"
    assert_health(load, fault, stack, tolerated=lambda probe: probe.status == 0)
    # The kill left the charges of streams it cut mid-relay pending (a request it cut before its charge has
    # none, one it cut after its settlement committed is charged, as the contract charges a stream that
    # delivered content), pending charges of no other request, and settle_stale refunded every one.
    assert cut_streams, "the kill cut no stream"
    assert 1 <= pending <= len(cut), f"{pending} charge(s) pending after the kill cut {len(cut)} request(s)"
    assert abandoned == pending
    assert stack.pending_charges() == 0
    # A request cut by the kill may have been settled just before it: charged, its answer lost.
    assert_credits_add_up(load, stack, unsure=cut_by_the_kill)
    assert_reconciled(reconciled, stack)
