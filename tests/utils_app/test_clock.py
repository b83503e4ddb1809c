"""utils_app.clock: the one clock windows, cooldowns, cache ages and usage dates read; utils_app.state: one reset."""
import time
from datetime import date, datetime, timezone

import pytest

from keys import auth_cache
from models_catalog import catalog
from utils_app import clock as product_clock
from utils_app import limits, state, windows

NOON = datetime(2030, 6, 15, 12, 0, tzinfo=timezone.utc).timestamp()


def test_in_service_the_clock_is_the_real_clocks_themselves():
    # No wrapper on the request path: a read is the C call it always was.
    assert product_clock.now is time.time and product_clock.monotonic is time.monotonic


def test_a_stopped_clock_moves_only_when_told_and_its_dates_and_ages_move_with_it(clock):
    clock.set(NOON)
    started = product_clock.monotonic()
    assert product_clock.now() == NOON
    assert product_clock.utcnow() == datetime(2030, 6, 15, 12, 0, tzinfo=timezone.utc)
    clock.advance(12 * 3600)
    assert product_clock.today() == date(2030, 6, 16)
    assert product_clock.monotonic() - started == 12 * 3600
    clock.set(NOON - 1)
    assert product_clock.utcnow().date() == date(2030, 6, 15)


def test_a_window_turns_when_the_clock_is_moved_past_its_end_and_not_before(clock):
    name = "key:clock-test"
    counts = [windows.count_and_read(name, (60,)).windows[0].count for _ in range(3)]
    assert counts == [1, 2, 3]
    left = windows.seconds_left(name, 60)
    clock.advance(left - 1)
    assert windows.count_and_read(name, (60,)).windows[0].count == 4  # its last second
    clock.advance(1)
    assert windows.count_and_read(name, (60,)).windows[0] == windows.Window(count=1, reset_seconds=60)


def test_the_catalog_snapshot_is_loaded_again_once_it_is_older_than_its_seconds(seeded, clock, settings,
                                                                                django_assert_num_queries):
    settings.CATALOG_CACHE_SECONDS = 5
    first = catalog.snapshot()
    clock.advance(4.9)
    with django_assert_num_queries(0):
        assert catalog.snapshot() is first
    clock.advance(0.2)
    assert catalog.snapshot() is not first


def test_one_reset_forgets_every_piece_of_process_state(seeded, free_key, settings):
    settings.SHARED_CACHE = False  # the window counters of this process, not Redis's
    windows.count_and_read("key:reset-test", (60,))
    limits._guessing["203.0.113.9"] = product_clock.monotonic() + 60
    auth_cache.key_with_digest(free_key[0].digest)
    snapshot = catalog.snapshot()
    stopped = product_clock.stop(NOON)

    state.reset()

    assert product_clock.now is time.time and product_clock.now() != stopped.now()
    assert windows.count_and_read("key:reset-test", (60,)).windows[0].count == 1
    assert not limits.guessing_addresses()
    assert auth_cache._entries == {}
    assert catalog.snapshot() is not snapshot


@pytest.mark.parametrize("forget", [windows.reset, limits.forget_guessers, auth_cache.clear, catalog.invalidate,
                                    product_clock.start])
def test_each_module_with_process_state_hands_its_reset_to_state(forget):
    assert forget in state._forgetters
