"""Heavy work under a gevent worker goes to a small pool of native threads; small work is done in place
until it adds up (utils_app.event_loop)."""
import threading

from utils_app import event_loop


def test_outside_gevent_everything_runs_in_place():
    off = event_loop.OffTheEventLoop()
    assert off.run(threading.get_ident, 10 * event_loop.IN_PLACE_MICROSECONDS) == threading.get_ident()
    assert off._pool is None


def test_under_gevent_heavy_work_runs_in_a_thread_and_small_work_in_place_until_it_adds_up(as_under_gevent):
    here = threading.get_ident()
    budget = event_loop.IN_PLACE_MICROSECONDS

    assert event_loop.run(threading.get_ident, budget) != here
    small = [event_loop.run(threading.get_ident, budget // 4) for _ in range(8)]
    assert small == [here] * 3 + [small[3]] + [here] * 3 + [small[7]]
    assert here not in (small[3], small[7])


def test_arguments_reach_the_work_wherever_it_runs(as_under_gevent):
    def joined(*parts, sep):
        return sep.join(parts)

    assert event_loop.run(joined, 0, "a", "b", sep="-") == "a-b"  # in place
    assert event_loop.run(joined, event_loop.IN_PLACE_MICROSECONDS, "a", "b", sep="+") == "a+b"  # in a thread
    assert as_under_gevent._pool is not None
