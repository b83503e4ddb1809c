"""An upstream pool under load while one of its deployments flaps (CONTRACT section 7).

The pooled-chat model has two deployments, each on an upstream of the test's own: one
stays healthy throughout, the other is switched, on a schedule, between healthy, failing
with 500, rate limited with 429 and Retry-After, and refusing the gateway's secret (401);
then its secret is "fixed" and ``manage.py probe_deployments`` brings it back. Eight
lanes of clients (two of them streaming) must never notice: every request is served,
charged once, and the deployment's state is read off the database and the shared cache
as it goes (no admin API).
"""
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from hashlib import sha256
from http.server import BaseHTTPRequestHandler

import pytest
import redis

from tests.faults.conftest import (
    CREDITS,
    HELLO,
    LANES,
    RECOVERY,
    Call,
    Fault,
    Lane,
    Load,
    Stack,
    _UpstreamServer,
    assert_clients_served,
    assert_health,
    assert_reconciled,
    report,
    serve,
)
from tests.gateway.conftest import chat_completion, chunk, usage_chunk, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.redis]

MODEL = "pooled-chat"
POOLED = Call("/v1/chat/completions", {"model": MODEL, "messages": HELLO})
POOLED_STREAM = Call("/v1/chat/completions", {"model": MODEL, "messages": HELLO, "stream": True})
ALLOWED_FAILS = 3
COOLDOWN = 5  # the model's cooldown_seconds
RETRY_AFTER = 1  # what the rate-limited upstream asks for: shorter than COOLDOWN, so the two can be told apart
SECRETS = {"flap": ("GATEWAY_UPSTREAM_FLAP_KEY", "sk-flap-upstream-0123456789"),
           "steady": ("GATEWAY_UPSTREAM_STEADY_KEY", "sk-steady-upstream-0123456789")}

POOL_CATALOG = """
[providers.flap]
base_url = "{flap}"
api_key_env = "GATEWAY_UPSTREAM_FLAP_KEY"
timeout = 5

[providers.steady]
base_url = "{steady}"
api_key_env = "GATEWAY_UPSTREAM_STEADY_KEY"
timeout = 5

[[models]]
id = "pooled-chat"
type = "chat"
owned_by = "pool"
cost = 1
access = ["free"]
allowed_fails = {allowed_fails}
cooldown_seconds = {cooldown}

  [[models.deployments]]
  provider = "flap"
  upstream_model = "flap-model"

  [[models.deployments]]
  provider = "steady"
  upstream_model = "steady-model"
"""

HEALTHY, FAILING, LIMITED, REVOKED = "healthy", "500", "429", "401"
ERRORS = {
    FAILING: (500, {"error": {"message": "The server had an error while processing your request.",
                              "type": "server_error", "code": None}}, {}),
    LIMITED: (429, {"error": {"message": "Rate limit reached for requests", "type": "requests",
                              "code": "rate_limit_exceeded"}}, {"Retry-After": str(RETRY_AFTER)}),
    REVOKED: (401, {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                              "code": "invalid_api_key"}}, {}),
}


# ---------------------------------------------------------------- the pool's upstreams

@dataclass(frozen=True)
class UpstreamCall:
    at: float  # time.monotonic() when it arrived
    answer: str  # the mode it was answered in
    probe: bool  # the gateway's probe (max_tokens 1), not a client's request


class _PoolHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        upstream = self.server.upstream
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        answer = upstream.answer(body)
        if answer != HEALTHY:
            status, error, headers = ERRORS[answer]
            return self._send(status, json.dumps(error).encode(), headers)
        if body.get("stream"):
            return self._stream(upstream.name)
        self._send(200, json.dumps(chat_completion(f"from {upstream.name}")).encode(), {})

    def _send(self, status: int, payload: bytes, headers: dict):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, name: str):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in (chunk(f"from {name}"), chunk(" streamed", finish_reason="stop"), usage_chunk()):
            self._event(json.dumps(event))
            time.sleep(0.01)
        self._event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")

    def _event(self, data: str):
        event = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")


class PoolUpstream:
    """An OpenAI-compatible chat upstream on 127.0.0.1 answering in the ``mode`` the test sets,
    and the record of every call it got."""

    def __init__(self, name: str):
        self.name = name
        self.mode = HEALTHY
        self.calls: list[UpstreamCall] = []
        self._lock = threading.Lock()
        self.server = _UpstreamServer(("127.0.0.1", 0), _PoolHandler)
        self.server.upstream = self
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, body: dict) -> str:
        with self._lock:
            mode = self.mode
            self.calls.append(UpstreamCall(time.monotonic(), mode, body.get("max_tokens") == 1))
        return mode

    def answered(self, mode: str, since: float = 0.0, until: float = float("inf")) -> list[float]:
        """When (monotonic) the client requests answered in ``mode`` arrived, within [since, until)."""
        return [call.at for call in self.calls if call.answer == mode and not call.probe and since <= call.at < until]


@pytest.fixture
def pool_upstreams():
    upstreams = {name: PoolUpstream(name) for name in ("flap", "steady")}
    for upstream in upstreams.values():
        upstream.thread.start()
    yield upstreams
    for upstream in upstreams.values():
        upstream.server.shutdown()
        upstream.server.server_close()


def seed_pool(stack: Stack, upstreams: dict, monkeypatch) -> dict[str, int]:
    """The pooled-chat model on the two upstreams; their secrets in the environment of the gateway and
    of the commands. Returns each deployment's id by provider name."""
    for env_name, secret in SECRETS.values():
        monkeypatch.setenv(env_name, secret)
    path = stack.data_dir / "pool_catalog.toml"
    path.write_text(POOL_CATALOG.format(flap=upstreams["flap"].base_url, steady=upstreams["steady"].base_url,
                                        allowed_fails=ALLOWED_FAILS, cooldown=COOLDOWN))
    stack.manage("seed_models", str(path))
    with stack.postgres.connect() as connection:
        return dict(connection.execute(
            "SELECT p.name, d.id FROM models_catalog_deployment d JOIN models_catalog_provider p "
            "ON p.id = d.provider_id JOIN models_catalog_aimodel m ON m.id = d.model_id "
            "WHERE m.model_id = %s", [MODEL]).fetchall())


def deployment_row(stack: Stack, deployment_id: int) -> tuple[datetime | None, str]:
    with stack.postgres.connect() as connection:
        return connection.execute("SELECT disabled_at, disabled_reason FROM models_catalog_deployment "
                                  "WHERE id = %s", [deployment_id]).fetchone()


class CoolWatch:
    """Samples the deployment's cooldown and disabled entries in the shared cache (dep:{id}:cool and
    dep:{id}:off, gateway.routing) while the load runs: (seconds since the load began, the cache's value,
    seconds it had left then: None for the disabled marker)."""

    def __init__(self, stack: Stack, deployment_id: int, load: Load):
        self.client = redis.Redis.from_url(stack.redis.url, socket_timeout=2)
        self.patterns = (f"*dep:{deployment_id}:cool", f"*dep:{deployment_id}:off")
        self.load = load
        self.samples: list[tuple[float, str, float | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "CoolWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name in [name for pattern in self.patterns for name in self.client.keys(pattern)]:
                value = (self.client.get(name) or b"").decode()
                left = None
                if value and value != "disabled":
                    left = float(value) - time.time()
                self.samples.append((self.load.now(), value, left))
            self._stop.wait(0.05)

    def between(self, start: float, end: float) -> list[tuple[str, float | None]]:
        return [(value, left) for at, value, left in self.samples if start <= at < end]


def bursts(times: list[float], gap: float = 0.5) -> list[list[float]]:
    """Calls grouped into bursts: a call within ``gap`` seconds of the one before belongs to its burst."""
    groups: list[list[float]] = []
    for at in sorted(times):
        if groups and at - groups[-1][-1] < gap:
            groups[-1].append(at)
        else:
            groups.append([at])
    return groups


# ---------------------------------------------------------------- the test

def test_a_flapping_deployment_is_cooled_disabled_and_probed_back_while_every_client_is_served(
        stack, pool_upstreams, monkeypatch):
    ids = seed_pool(stack, pool_upstreams, monkeypatch)
    flap, steady = pool_upstreams["flap"], pool_upstreams["steady"]
    lanes = ([Lane(secret, (POOLED,)) for secret in stack.secrets[:6]]
             + [Lane(secret, (POOLED_STREAM,)) for secret in stack.secrets[6:LANES]])
    marks: dict[str, float] = {}  # monotonic time each phase began

    def switch(mode: str, mark: str) -> None:
        flap.mode = mode
        marks[mark] = time.monotonic()

    # PROBE_SECONDS=0: only the command below may enable the deployment again.
    with serve(stack, PROBE_SECONDS="0") as base, Load(base, lanes) as load, \
            CoolWatch(stack, ids["flap"], load) as watch:
        marks["healthy"] = time.monotonic()
        time.sleep(2.0)
        fault = Fault("one deployment of two flapping: 429, 500, revoked secret, probed back", start=load.now())
        switch(LIMITED, "limited")
        time.sleep(3.5)
        switch(FAILING, "failing")
        time.sleep(3.0)
        switch(REVOKED, "revoked")
        # Still cooling from the 500s for a couple of seconds; then one call finds the secret refused.
        disabled = wait_for(lambda: deployment_row(stack, ids["flap"])[0] is not None, timeout=COOLDOWN + 8)
        when_disabled = deployment_row(stack, ids["flap"])
        time.sleep(1.5)
        switch(HEALTHY, "fixed")  # the provider accepts the secret again; the gateway does not know yet
        fault.end = load.now()
        time.sleep(1.5)
        marks["probe"] = time.monotonic()
        probed = stack.manage("probe_deployments").stdout
        marks["probed"] = time.monotonic()
        back = wait_for(lambda: flap.answered(HEALTHY, since=marks["probed"]), timeout=15)
        time.sleep(RECOVERY + 2.0)

    disabled_at, disabled_reason = deployment_row(stack, ids["flap"])
    reconciled = stack.reconcile()
    fault.notes.append(
        "flap calls by answer " + str(dict(Counter(call.answer for call in flap.calls if not call.probe)))
        + f", steady {len(steady.calls)}; probe: {probed.strip().splitlines()[-1]}")
    report(load, fault, reconciled[1])

    # Every client was served, streams included: the steady deployment was always there.
    assert_clients_served(load, fault, stack)
    assert not [result for result in load.results if result.status >= 500]
    assert any(result.call.stream for result in load.results)
    assert_health(load, fault, stack)

    # Healthy: both deployments shared the traffic.
    assert flap.answered(HEALTHY, marks["healthy"], marks["limited"]) and steady.answered(HEALTHY)

    # 429 with Retry-After: cooled at once for the second it asked, not for the model's cooldown_seconds:
    # the refused calls come in short bursts, a new one each time a second has passed.
    limited = bursts(flap.answered(LIMITED, marks["limited"], marks["failing"]))
    assert len(limited) >= 2, f"429s at {limited}: the deployment stayed cooled longer than its Retry-After"
    assert all(len(burst) <= 1 + LANES for burst in limited), f"not cooled at once: {limited}"
    cooling = [left for value, left in watch.between(marks["limited"] - load.began, marks["failing"] - load.began)
               if left is not None]
    assert cooling and max(cooling) <= RETRY_AFTER + 0.05, f"cooldowns left while rate limited: {cooling}"

    # 500s: allowed_fails of them cool it down for cooldown_seconds, and it is not asked meanwhile.
    failing = flap.answered(FAILING, marks["failing"], marks["revoked"])
    assert ALLOWED_FAILS <= len(failing) <= ALLOWED_FAILS + LANES, f"{len(failing)} calls answered 500"
    cooling = [left for value, left in watch.between(marks["failing"] - load.began, marks["revoked"] - load.began)
               if left is not None]
    assert cooling and RETRY_AFTER + 0.5 < max(cooling) <= COOLDOWN + 0.05, f"cooldowns left: {cooling}"

    # The refused secret disabled the deployment in the database, and nobody asked it again until the probe.
    assert disabled, "the deployment was not disabled after its secret was refused"
    assert when_disabled[0] is not None and "401" in when_disabled[1], when_disabled
    refused = flap.answered(REVOKED)
    assert 1 <= len(refused) <= 1 + LANES, f"{len(refused)} calls refused"
    assert "disabled" in [value for value, _ in watch.between(marks["revoked"] - load.began,
                                                             marks["probe"] - load.began)]
    after_disable = flap.answered(HEALTHY, since=max(refused) + 1.0, until=marks["probe"])
    assert not after_disable, f"{len(after_disable)} requests sent to the disabled deployment before the probe"
    assert marks["probe"] - (max(refused) + 1.0) >= 1.0  # the window above was not empty

    # The probe found the secret fixed and enabled it again; it is back in rotation.
    assert "ok, enabled again" in probed and "1 probed, 0 failed" in probed
    assert (disabled_at, disabled_reason) == (None, "")
    assert back, "the deployment probed back was not used again"

    # Money: each key's balance moved by what its client was answered, as each answer told it, and the
    # ledger has one completed charge per answer, naming the deployment that served it.
    assert_pool_credits(load, stack, ids, {name: upstream.answered(HEALTHY) for name, upstream in
                                           pool_upstreams.items()})
    assert stack.pending_charges() == 0
    assert_reconciled(reconciled, stack)


def assert_pool_credits(load: Load, stack: Stack, ids: dict[str, int], served: dict[str, list]) -> None:
    """Each lane: its balance fell by one credit per answer, its ledger holds one completed charge per
    answer and no refund, and the X-Remaining-Credits its client saw went down by one each time. Each
    deployment: as many charges name it as it answered the clients."""
    problems = []
    with stack.postgres.connect() as connection:
        for index, lane in enumerate(load.lanes):
            results = sorted((result for result in load.results if result.lane == index),
                             key=lambda result: result.started)
            key_id, credits = connection.execute("SELECT id, credits FROM keys_apikey WHERE digest = %s",
                                                 [sha256(lane.secret.encode()).hexdigest()]).fetchone()
            kinds = dict(connection.execute(
                "SELECT kind || ':' || status, count(*) FROM keys_ledgerentry WHERE key_id = %s "
                "AND kind IN ('charge', 'refund') GROUP BY 1", [key_id]).fetchall())
            seen = [result.remaining for result in results]
            told = [CREDITS - turn for turn in range(1, len(results) + 1)]
            if CREDITS - credits != len(results) or kinds != {"charge:completed": len(results)} or seen != told:
                problems.append(f"lane {index}: {len(results)} answers, balance fell by {CREDITS - credits}, "
                                f"ledger {kinds}, client told {seen[:3]}…{seen[-3:]}")
        by_deployment = dict(connection.execute(
            "SELECT deployment_id, count(*) FROM keys_ledgerentry WHERE kind = 'charge' AND model = %s "
            "GROUP BY 1", [MODEL]).fetchall())
    for name, calls in served.items():
        if by_deployment.get(ids[name], 0) != len(calls):
            problems.append(f"{name}: {len(calls)} answers upstream, {by_deployment.get(ids[name], 0)} charges "
                            f"name its deployment")
    assert not problems, "credits do not add up:\n" + "\n".join(problems)
