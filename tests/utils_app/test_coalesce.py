"""utils_app.coalesce: concurrent callers' items done in groups, each caller getting its own result."""
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from utils_app.coalesce import Coalescer, GroupInterrupted

ROOT = Path(__file__).resolve().parents[2]


class Gate:
    """A work function that records its groups and, while ``held``, waits to be let go."""

    def __init__(self):
        self.groups = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def hold(self):
        self.release.clear()
        self.entered.clear()

    def __call__(self, items):
        self.groups.append(list(items))
        self.entered.set()
        assert self.release.wait(10)
        return [item * 10 for item in items]


def start(function, *args):
    thread = threading.Thread(target=function, args=args, daemon=True)
    thread.start()
    return thread


def wait_queued(coalescer, count):
    for _ in range(1000):
        if len(coalescer._queue) >= count:
            return
        threading.Event().wait(0.005)
    raise AssertionError(f"{count} callers never queued")


def queued_behind_a_group(coalescer, gate, first, queued):
    """Run ``first`` in a group held open until each of ``queued`` has queued, in that order, then let
    them all go; every caller's result, by item."""
    results = {}

    def call(item):
        results[item] = coalescer.run(item)

    gate.hold()
    threads = [start(call, first)]
    assert gate.entered.wait(5)
    for number, item in enumerate(queued, start=1):
        threads.append(start(call, item))
        wait_queued(coalescer, number)
    gate.release.set()
    for thread in threads:
        thread.join(5)
    return results


def test_a_lone_caller_runs_its_own_group_at_once():
    gate = Gate()
    coalescer = Coalescer(gate, max_size=8)
    assert coalescer.run(3) == 30
    assert coalescer.run(4) == 40
    assert gate.groups == [[3], [4]]


def test_callers_arriving_while_a_group_runs_are_served_together_by_the_next_group():
    gate = Gate()
    coalescer = Coalescer(gate, max_size=8)
    assert queued_behind_a_group(coalescer, gate, 1, (2, 3, 4)) == {1: 10, 2: 20, 3: 30, 4: 40}
    assert gate.groups == [[1], [2, 3, 4]]
    assert not coalescer._led and not coalescer._queue


def test_a_group_takes_at_most_max_size_items_and_the_rest_wait_for_the_next():
    gate = Gate()
    coalescer = Coalescer(gate, max_size=2)
    results = queued_behind_a_group(coalescer, gate, 0, (1, 2, 3, 4, 5))
    assert results == {item: item * 10 for item in range(6)}
    assert gate.groups == [[0], [1, 2], [3, 4], [5]]


def test_items_that_need_one_name_to_themselves_go_in_different_groups():
    gate = Gate()
    coalescer = Coalescer(gate, max_size=8, lock_of=lambda item: (item % 3, True))
    queued = (1, 4, 2, 7, 5)  # names 1, 1, 2, 1, 2
    results = queued_behind_a_group(coalescer, gate, 100, queued)
    assert results == {item: item * 10 for item in (100, *queued)}
    assert gate.groups[1:] == [[1, 2], [4, 5], [7]]
    for group in gate.groups:
        assert len({item % 3 for item in group}) == len(group)


def test_items_may_share_a_name_unless_one_of_them_needs_it_to_itself():
    gate = Gate()
    # Even items share their name; odd ones need theirs to themselves. Names: the item // 10.
    coalescer = Coalescer(gate, max_size=8, lock_of=lambda item: (item // 10, item % 2 == 1))
    queued = (10, 12, 11, 14, 21, 20, 22, 23, 30)
    results = queued_behind_a_group(coalescer, gate, 100, queued)
    assert results == {item: item * 10 for item in (100, *queued)}
    # 10, 12 and 14 share name 1; 11 needs it alone. 21 takes name 2 alone; 20 and 22 wait, then share it.
    assert gate.groups[1:] == [[10, 12, 14, 21, 30], [11, 20, 22], [23]]


def test_a_caller_that_starts_a_group_after_one_with_company_gathers_first_and_those_arriving_join_it():
    gate = Gate()
    gathered, arrivals, results = [], [], {}

    def gather():  # stands for the other greenlets that run while the caller yields
        gathered.append(len(gate.groups))
        if len(gathered) == 1:
            arrivals.extend(start(lambda item: results.__setitem__(item, coalescer.run(item)), item) for item in (8, 9))
            wait_queued(coalescer, 3)

    coalescer = Coalescer(gate, max_size=8, gather=gather)
    assert coalescer.run(1) == 10  # alone at a quiet moment
    assert queued_behind_a_group(coalescer, gate, 2, (3, 4)) == {2: 20, 3: 30, 4: 40}
    assert gathered == []  # no caller that started a group came after one with company
    assert coalescer.run(5) == 50  # the group of 3 and 4 had company: 5 gathers, and 8 and 9 join it
    for thread in arrivals:
        thread.join(5)
    assert results == {8: 80, 9: 90}
    assert gate.groups == [[1], [2], [3, 4], [5, 8, 9]] and gathered == [3]
    assert coalescer.run(6) == 60 and gathered == [3, 4]  # still after a group with company
    assert coalescer.run(7) == 70 and gathered == [3, 4]  # after 6 alone: none


def test_a_caller_interrupted_while_it_gathers_hands_its_lead_on():
    class Interrupted(BaseException):
        pass

    gate = Gate()
    later = []

    def gather():
        later.append(start(lambda: later.append(coalescer.run(7))))
        wait_queued(coalescer, 2)
        raise Interrupted

    coalescer = Coalescer(gate, max_size=8, gather=gather)
    queued_behind_a_group(coalescer, gate, 1, (2, 3))  # a group with company: the next caller gathers
    with pytest.raises(Interrupted):
        coalescer.run(4)
    later[0].join(5)
    assert later[1:] == [70]  # the caller queued meanwhile led a group of its own
    assert gate.groups[-1] == [7] and not coalescer._led and not coalescer._queue


def test_what_the_work_raises_every_caller_of_the_group_raises():
    release = threading.Event()
    entered = threading.Event()
    calls = []

    def work(items):
        calls.append(list(items))
        if len(calls) == 1:
            entered.set()
            assert release.wait(5)
            return [item for item in items]
        raise ValueError("the database went away")

    coalescer = Coalescer(work, max_size=8)
    outcomes = {}

    def call(item):
        try:
            outcomes[item] = coalescer.run(item)
        except ValueError as exc:
            outcomes[item] = str(exc)

    first = start(call, 1)
    assert entered.wait(5)
    others = [start(call, item) for item in (2, 3)]
    wait_queued(coalescer, 2)
    release.set()
    for thread in [first, *others]:
        thread.join(5)
    assert outcomes == {1: 1, 2: "the database went away", 3: "the database went away"}
    assert calls[1:] == [[2, 3]]
    with pytest.raises(ValueError):  # a lone caller after a failed group leads a group of its own
        coalescer.run(4)
    assert calls[2:] == [[4]]
    assert not coalescer._led and not coalescer._queue


def test_a_result_count_that_does_not_match_the_group_is_an_error_for_every_caller():
    coalescer = Coalescer(lambda items: [], max_size=4)
    with pytest.raises(RuntimeError, match="a group of 1 got 0 results"):
        coalescer.run(1)


def test_many_threads_each_get_their_own_result_and_nothing_is_left_queued():
    groups = []

    def work(items):
        groups.append(len(items))
        threading.Event().wait(0.001)
        return [(item, "done") for item in items]

    coalescer = Coalescer(work, max_size=4, lock_of=lambda item: (item % 5, True))
    results = {}

    def call(base):
        for step in range(50):
            item = base * 1000 + step
            results[item] = coalescer.run(item)

    threads = [start(call, base) for base in range(12)]
    for thread in threads:
        thread.join(30)
    assert len(results) == 600 and all(results[item] == (item, "done") for item in results)
    assert sum(groups) == 600 and max(groups) <= 4
    assert max(groups) > 1  # twelve threads at once did share statements
    assert not coalescer._led and not coalescer._queue


def test_the_max_size_must_be_at_least_one():
    with pytest.raises(ValueError):
        Coalescer(lambda items: items, max_size=0)


GEVENT_SCRIPT = textwrap.dedent("""
    from gevent import monkey; monkey.patch_all()
    import gevent, gevent.event, sys
    sys.path.insert(0, {root!r})
    from utils_app.coalesce import Coalescer

    groups, gates = [], []

    def work(items):
        groups.append(list(items))
        gate = gevent.event.Event()
        gates.append(gate)
        gate.wait()
        return [item + 1 for item in items]

    def until(condition):
        for _ in range(10000):
            if condition():
                return
            gevent.sleep(0)
        raise SystemExit("never happened")

    coalescer = Coalescer(work, max_size=8)

    # A leader killed in the middle of its group: the others of its group are told, and the caller
    # queued behind it still gets a leader.
    alone = gevent.spawn(coalescer.run, 0)
    until(lambda: len(gates) == 1)
    leader, member = gevent.spawn(coalescer.run, 1), gevent.spawn(coalescer.run, 2)
    until(lambda: len(coalescer._queue) == 2)
    gates[0].set()
    until(lambda: len(gates) == 2)  # 1 leads the group of 1 and 2
    behind = gevent.spawn(coalescer.run, 3)
    until(lambda: len(coalescer._queue) == 1)
    leader.kill()
    until(lambda: len(gates) == 3)  # 3 leads a group of its own
    gates[2].set()
    gevent.joinall([alone, member, behind], timeout=5)
    print("after kill:", groups, alone.value, type(member.exception).__name__, behind.value)

    # A caller killed right after it was handed the lead passes it on to the next one queued.
    heir = []
    hand_over = coalescer._hand_over

    def hand_over_then_kill_the_heir():
        # The kill is delivered before the heir wakes (gevent runs its callbacks in order): it dies
        # holding the lead, inside its wait.
        if heir:
            heir.pop().kill(block=False)
        hand_over()

    coalescer._hand_over = hand_over_then_kill_the_heir
    first = gevent.spawn(coalescer.run, 10)
    until(lambda: len(gates) == 4)
    heir.append(gevent.spawn(coalescer.run, 11))
    later = gevent.spawn(coalescer.run, 12)
    until(lambda: len(coalescer._queue) == 2)
    gates[3].set()
    until(lambda: len(gates) == 5)
    gates[4].set()
    gevent.joinall([first, later], timeout=5)
    print("after leave:", groups[3:], first.value, later.value, coalescer._led, len(coalescer._queue))
""")


def test_under_gevent_a_killed_leader_or_waiter_never_leaves_callers_without_a_leader():
    script = GEVENT_SCRIPT.format(root=str(ROOT))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "after kill: [[0], [1, 2], [3]] 1 GroupInterrupted 4"
    assert lines[1] == "after leave: [[10], [12]] 11 13 False 0"
