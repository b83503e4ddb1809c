"""gunicorn's gevent workers each keep to a core of their own (gateway.gunicorn_conf.pick_cpu)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.gateway.conftest import gunicorn, wait_for

ROOT = Path(__file__).resolve().parents[2]

# Each case: the settings and live workers the master has when it is about to fork one more.
PICKS = textwrap.dedent("""
    import json, sys, types
    import gateway.gunicorn_conf as conf
    from gunicorn.workers.ggevent import GeventWorker
    from gunicorn.workers.gthread import ThreadWorker

    def pick(cpus, held, *, workers=2, kind=GeventWorker, pin=True, now=None):
        conf.allowed_cpus = lambda: cpus
        conf.pin_workers = pin
        live = {pid: types.SimpleNamespace(cpu=cpu) for pid, cpu in enumerate(held)}
        server = types.SimpleNamespace(cfg=types.SimpleNamespace(worker_class=kind, workers=workers), WORKERS=live)
        if now is not None:  # the master's count after TTIN or TTOU
            server.num_workers = now
        return conf.pick_cpu(server)

    print(json.dumps({
        "first": pick([0, 1], []),
        "second": pick([0, 1], [0]),
        "a cpuset's own cores": [pick([2, 5], []), pick([2, 5], [2])],
        "the dead one's core": pick([0, 1, 2, 3], [0, 1, 3], workers=4),
        "a reload's new workers": [pick([0, 1], [0, 1]), pick([0, 1], [0, 1, 0])],
        "a worker that was not pinned": pick([0, 1], [None]),
        "more workers than cores": pick([0, 1], [0], workers=3),
        "more after TTIN": pick([0, 1], [0, 1], now=3),
        "back to as many after TTOU": pick([0, 1], [0], workers=3, now=2),
        "one core": pick([0], [], workers=1),
        "threads": pick([0, 1], [], workers=1, kind=ThreadWorker),
        "turned off": pick([0, 1], [], pin=False),
    }))
""")


def _run(script: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def test_each_new_worker_takes_the_core_the_fewest_live_workers_keep_to():
    done = _run(PICKS)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "first": 0,
        "second": 1,
        "a cpuset's own cores": [2, 5],
        "the dead one's core": 2,
        "a reload's new workers": [0, 1],
        "a worker that was not pinned": 0,
        "more workers than cores": None,
        "more after TTIN": None,
        "back to as many after TTOU": 1,
        "one core": None,
        "threads": None,
        "turned off": None,
    }


def test_pinning_is_on_by_default_can_be_turned_off_and_a_bad_value_stops_the_server():
    setting = "import gateway.gunicorn_conf as c; print(c.pin_workers)"
    assert _run(setting).stdout.strip() == "True"
    assert _run(setting, GUNICORN_PIN_WORKERS="0").stdout.strip() == "False"
    refused = _run(setting, GUNICORN_PIN_WORKERS="sometimes")
    assert refused.returncode != 0
    assert "GUNICORN_PIN_WORKERS must be a boolean" in refused.stderr
    assert "Traceback" not in refused.stderr


REFUSED = textwrap.dedent("""
    import os, types
    import gateway.gunicorn_conf as conf
    from gunicorn.workers.ggevent import GeventWorker

    def refuse(pid, cpus):
        raise OSError(22, "Invalid argument")

    os.sched_setaffinity = refuse
    warnings = []
    log = types.SimpleNamespace(warning=lambda message, *args: warnings.append(message % args))
    cfg = types.SimpleNamespace(workers=2, worker_class=GeventWorker, worker_class_str="gevent", worker_connections=9)
    worker = types.SimpleNamespace(cpu=1)
    conf.post_fork(types.SimpleNamespace(cfg=cfg, log=log), worker)
    print(worker.cpu, os.environ["GATEWAY_WORKER_CONNECTIONS"], warnings)
""")


def test_a_worker_whose_core_is_refused_boots_on_any_core_with_a_warning():
    done = _run(REFUSED)
    assert done.returncode == 0, done.stderr
    cpu, connections, warnings = done.stdout.split(" ", 2)
    assert (cpu, connections) == ("None", "9")
    assert "serves on any core: keeping it to core 1 was refused" in warnings


def _cores(pid: int) -> set[int]:
    return os.sched_getaffinity(pid)


@pytest.mark.postgres
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin two workers apart")
@pytest.mark.served
def test_served_gevent_workers_keep_to_cores_of_their_own_and_a_replacement_takes_the_dead_ones(
        transactional_db, tmp_path):
    if not os.environ.get("REDIS_URL", "").strip():
        pytest.skip("gevent workers need REDIS_URL (runs in .ci/run)")
    with gunicorn(tmp_path / "server", workers=2) as base:
        placed = {}

        def both_workers_placed() -> bool:  # each keeps to its core from right after its fork (post_fork)
            placed.clear()
            placed.update({pid: _cores(pid) for pid in base.worker_pids()})
            return len(placed) == 2 and all(len(cores) == 1 for cores in placed.values())

        assert wait_for(both_workers_placed, timeout=30), placed
        assert len(set.union(*placed.values())) == 2, placed  # one core each, not the same one
        assert _cores(base.pid) == os.sched_getaffinity(0)  # the master keeps every core

        victim, survivor = sorted(placed)
        os.kill(victim, signal.SIGKILL)
        replaced = []

        def a_new_worker_serves_beside_the_survivor() -> bool:  # one look at the workers, not two
            workers = set(base.worker_pids())
            replaced[:] = workers - {survivor, victim}
            return len(workers) == 2 and survivor in workers and len(replaced) == 1

        assert wait_for(a_new_worker_serves_beside_the_survivor, timeout=30)
        [replacement] = replaced
        # Its core is set right after the fork (post_fork), a moment after the process exists.
        assert wait_for(lambda: _cores(replacement) == placed[victim], timeout=10), _cores(replacement)
        assert _cores(survivor) == placed[survivor]
