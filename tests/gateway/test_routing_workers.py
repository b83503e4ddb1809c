"""Upstream pools served by gunicorn: a deployment's health is one memory for every worker
(CONTRACT section 7, "Health is shared"; docs/routing.md).

Each test drives requests through chosen workers: a client connection kept alive stays
with the worker that accepted it, and /proc says which worker holds the server's end of
it. What a worker did is then read off the fake upstreams' call counts. The last test is
in process: what the shared round trip costs a worker per request.
"""
import http.client
import json
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path

import pytest
import redis

from gateway import deployment_health, routing
from models_catalog import catalog
from models_catalog.models import AiModel, Deployment
from tests.gateway.conftest import (
    UPSTREAM_KEY_ENV,
    UPSTREAM_SECRET,
    add_provider,
    chat_completion,
    gunicorn,
    post,
)

pytestmark = pytest.mark.postgres
HELLO = [{"role": "user", "content": "Hello"}]


def pooled(primary, backup, **model_fields) -> dict[str, Deployment]:
    """A chat model "pooled" on two fake upstreams: ``primary`` at priority 1, ``backup`` at 2."""
    model = AiModel.objects.create(model_id="pooled", type="chat", owned_by="test", cost=1, tiers=["free"],
                                   **model_fields)
    deployments = {}
    for priority, (name, server) in enumerate((("primary", primary), ("backup", backup)), start=1):
        server.json("/chat/completions", chat_completion(f"from {name}"))
        deployments[name] = Deployment.objects.create(model=model, provider=add_provider(name, server.base_url),
                                                      secret_env=UPSTREAM_KEY_ENV, priority=priority)
    return deployments


# ---------------------------------------------------------------- which worker serves a connection

def _established() -> list[tuple[int, int, str]]:
    """(local port, remote port, socket inode) of every established TCP connection of this machine."""
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
    with suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:["):-1])
    return inodes


class Client:
    """One kept-alive connection to the gateway, and the worker that serves it."""

    def __init__(self, base, secret: str):
        self.base = base
        self.secret = secret
        self.port = int(base.rsplit(":", 1)[1])
        self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self.connection.connect()
        self.worker = self._worker()

    def _worker(self) -> int | None:
        """The worker holding the server's end of this connection (accepted once it answered a request)."""
        self._send("GET", "/health")
        client_port = self.connection.sock.getsockname()[1]
        ends = {inode for local, remote, inode in _established() if local == self.port and remote == client_port}
        holders = [pid for pid in self.base.worker_pids() if _socket_inodes(pid) & ends]
        return holders[0] if len(holders) == 1 else None

    def _send(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {self.secret}", "Content-Type": "application/json"}
        self.connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        response = self.connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")

    def chat(self) -> str:
        """A chat on the pooled model through this worker; the upstream that answered it."""
        status, body = self._send("POST", "/v1/chat/completions", {"model": "pooled", "messages": HELLO})
        assert status == 200, body
        # The connection was kept: the same worker served it (a reconnect would have a new port).
        assert self._worker() == self.worker, "the connection moved to another worker"
        return body["choices"][0]["message"]["content"].removeprefix("from ")

    def close(self) -> None:
        self.connection.close()


def one_client_per_worker(base, secret: str, workers: int = 2, tries: int = 40) -> list[Client]:
    """A kept-alive client on each worker: new connections until each worker has accepted one."""
    chosen: dict[int, Client] = {}
    extra = []
    for _ in range(tries):
        client = Client(base, secret)
        if client.worker is not None and client.worker not in chosen:
            chosen[client.worker] = client
        else:
            extra.append(client)
        if len(chosen) == workers:
            break
    for client in extra:
        client.close()
    assert len(chosen) == workers, f"{tries} connections reached only workers {sorted(chosen)}"
    return list(chosen.values())


@pytest.fixture
def served_secret(transactional_db, make_key, monkeypatch):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)  # inherited by the gunicorn process
    _, secret = make_key(credits=1000, max_credits=1000, rpm=1000)
    return secret


# ---------------------------------------------------------------- two workers on Redis

@pytest.mark.redis
@pytest.mark.served
def test_failures_seen_by_two_workers_add_up_and_the_cooldown_keeps_both_away(
        served_secret, upstream, backup_upstream, tmp_path):
    deployments = pooled(upstream, backup_upstream, allowed_fails=2, cooldown_seconds=60)
    upstream.fail_all(500)
    upstream.replies.clear()
    with gunicorn(tmp_path / "server", workers=2, env={"PROBE_SECONDS": "0"}) as base:
        first, second = one_client_per_worker(base, served_secret)
        # One failure in each worker: two within the minute, the model's allowed_fails.
        assert first.chat() == "backup"
        assert second.chat() == "backup"
        assert len(upstream.posts()) == 2
        # Cooling: neither worker asks the failing upstream again.
        for _ in range(4):
            assert second.chat() == "backup"
            assert first.chat() == "backup"
        assert len(upstream.posts()) == 2
    state = deployment_health.states([deployments["primary"]])[deployments["primary"].pk]
    assert (state.state, state.failures) == ("cooling", 2)
    assert len(backup_upstream.posts()) == 10


@pytest.mark.redis
@pytest.mark.served
def test_a_deployment_cooled_in_one_worker_is_skipped_by_the_other_on_its_next_request(
        served_secret, upstream, backup_upstream, tmp_path):
    pooled(upstream, backup_upstream, allowed_fails=1, cooldown_seconds=60)
    with gunicorn(tmp_path / "server", workers=2, env={"PROBE_SECONDS": "0"}) as base:
        first, second = one_client_per_worker(base, served_secret)
        assert second.chat() == "primary"  # the second worker has served through the primary
        upstream.json("/chat/completions", {"error": {"message": "overloaded"}}, status=503)
        assert first.chat() == "backup"
        assert len(upstream.posts()) == 2
        assert second.chat() == "backup"
        assert len(upstream.posts()) == 2


@pytest.mark.redis
@pytest.mark.served
def test_a_secret_disabled_in_one_worker_is_not_tried_by_the_other_before_its_catalog_refreshes(
        served_secret, upstream, backup_upstream, tmp_path):
    deployments = pooled(upstream, backup_upstream)
    # Snapshots of the catalog that outlive the test: only the shared marker can tell the other worker.
    env = {"PROBE_SECONDS": "0", "CATALOG_CACHE_SECONDS": "600"}
    with gunicorn(tmp_path / "server", workers=2, env=env) as base:
        first, second = one_client_per_worker(base, served_secret)
        assert second.chat() == "primary"  # its snapshot holds the primary enabled
        upstream.json("/chat/completions", {"error": {"message": "Incorrect API key provided",
                                                      "code": "invalid_api_key"}}, status=401)
        assert first.chat() == "backup"
        primary = Deployment.objects.get(pk=deployments["primary"].pk)
        assert primary.disabled_at is not None and "401" in primary.disabled_reason
        for _ in range(3):
            assert second.chat() == "backup"
        assert len(upstream.posts()) == 2  # the success, then the refusal: never again


# ---------------------------------------------------------------- the embedded default: one worker, threads

@pytest.mark.served
def test_the_embedded_default_shares_health_across_its_threads(served_secret, upstream, backup_upstream, tmp_path):
    pooled(upstream, backup_upstream, allowed_fails=3, cooldown_seconds=60)
    # Each failure takes half a second, so four requests sent together are in four threads at once.
    upstream.fail_all(500, delay=0.5)
    upstream.replies.clear()
    env = {"REDIS_URL": "", "GUNICORN_WORKER_CLASS": "gthread", "PROBE_SECONDS": "0"}
    with gunicorn(tmp_path / "server", workers=1, threads=4, env=env) as base:
        def chat(_) -> str:
            client = Client(base, served_secret)
            try:
                return client.chat()
            finally:
                client.close()

        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(chat, range(4))) == ["backup"] * 4
        failed = len(upstream.posts())
        assert failed >= 3  # each thread saw one failure at most; together they cool the deployment
        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(chat, range(8))) == ["backup"] * 8
        assert len(upstream.posts()) == failed


# ---------------------------------------------------------------- latency routing, measured across the fleet

@pytest.mark.parametrize("served", [pytest.param("two workers on Redis", marks=pytest.mark.redis),
                                    "the embedded default"])
@pytest.mark.served
def test_latency_routing_sends_most_requests_to_the_faster_deployment_once_both_are_measured(
        served, served_secret, upstream, backup_upstream, tmp_path):
    model = AiModel.objects.create(model_id="pooled", type="chat", owned_by="test", cost=1, tiers=["free"],
                                   routing="latency")
    upstream.json("/chat/completions", chat_completion("from fast"))
    backup_upstream.json("/chat/completions", chat_completion("from slow"), delay=0.25)
    for name, server in (("fast", upstream), ("slow", backup_upstream)):
        Deployment.objects.create(model=model, provider=add_provider(name, server.base_url),
                                  secret_env=UPSTREAM_KEY_ENV)
    if served == "the embedded default":
        env, workers = {"REDIS_URL": "", "GUNICORN_WORKER_CLASS": "gthread"}, 1
    else:
        env, workers = {}, 2
    with gunicorn(tmp_path / "server", workers=workers, env={"PROBE_SECONDS": "0", **env}) as base:
        clients = one_client_per_worker(base, served_secret, workers=workers)
        # Each worker's figures reach the shared cache with its next request: ten measure both.
        measuring = Counter(clients[turn % workers].chat() for turn in range(10))
        assert measuring["fast"] and measuring["slow"], measuring
        if workers > 1:  # the fleet's figures, as this process reads them from the same Redis
            latency = routing.read_health(catalog.get_model("pooled")).latency
            assert len(latency) == 2 and max(latency.values()) >= 250, latency
        served_by = Counter(clients[turn % workers].chat() for turn in range(80))
    # At least four in five (one in ten explores the slow one; a random choice would give half).
    assert served_by["fast"] >= 64, served_by


# ---------------------------------------------------------------- what the shared round trip costs a worker

@pytest.mark.redis
def test_the_limits_and_health_round_trip_builds_no_redis_client_per_request(
        client, make_key, upstream, backup_upstream, monkeypatch):
    # A redis-py client copies its 169 reply callbacks into a case-insensitive dict when it is built:
    # a couple of hundred microseconds of the worker's CPU that a request should not pay each time
    # (before pools, the limits script kept the client it was registered with).
    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    pooled(upstream, backup_upstream)
    _, secret = make_key(credits=100, max_credits=100, rpm=1000)
    body = {"model": "pooled", "messages": HELLO}
    assert post(client, "/v1/chat/completions", body, secret).status_code == 200  # the script is loaded
    built = []
    original = redis.Redis.__init__

    def counted(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counted)
    for _ in range(3):
        assert post(client, "/v1/chat/completions", body, secret).status_code == 200
    assert len(built) == 0, f"{len(built)} redis clients built for 3 requests"
