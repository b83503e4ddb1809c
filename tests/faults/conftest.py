"""Private servers for the fault tests, and the client load that watches the gateway through a fault.

A fault test breaks something the gateway depends on for a few seconds while clients
keep sending metered requests, then judges what those clients saw, what /health said
and what the credits say. Every server here is the test's own: PostgreSQL, Redis and
an upstream on 127.0.0.1 ports of their own, stopped by their process ids, so a fault
never touches the machine's shared PostgreSQL or Redis. One migrated cluster holding
the test keys is made once per session and copied for each test, whose own postmaster
then runs on the copy: a migration takes seconds, a copy a fraction of one.
"""
import json
import os
import pwd
import random
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from hashlib import sha256
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import pytest
import requests

from tests.gateway.conftest import chat_completion, chunk, gunicorn, usage_chunk

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "gateway"
LANES = 8  # client threads, each with its own key so that its credits can be counted
CREDITS = 10_000  # per key: far more than a test spends, so no request is ever refused for credits
PACE = 0.1  # seconds between a lane's requests: 600 a minute, under the keys' rpm of 1000
DEADLINE = 10.0  # a client gives up on a request after this long; a request that long is a hang
RECOVERY = 3.0  # after a fault ends, requests may still fail this long; after it every one must succeed
BEFORE = AFTER = 2.0  # seconds of load before a fault and after the recovery window
WORKERS = 2
UPSTREAM_SECRET_ENV = "GATEWAY_UPSTREAM_FAULT_KEY"


# ---------------------------------------------------------------- ports, binaries, users

_ports_given: set[int] = set()


def free_port() -> int:
    """A port nothing listens on, outside the ephemeral range: a server stopped mid-test must get
    its port back when it starts again, which an outgoing connection could otherwise have taken."""
    start = random.randrange(19100, 19900)
    for port in range(start, start + 100):
        if port in _ports_given:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _ports_given.add(port)
        return port
    raise RuntimeError(f"no free port in {start}-{start + 99}")


def postgres_bin() -> Path | None:
    """The newest PostgreSQL server binaries. Debian keeps them in a folder per major version,
    off PATH; elsewhere initdb and pg_ctl are usually on PATH."""
    versions = [(int(folder.parent.name), folder) for folder in Path("/usr/lib/postgresql").glob("*/bin")
                if folder.parent.name.isdigit() and (folder / "initdb").exists() and (folder / "pg_ctl").exists()]
    if versions:
        return max(versions)[1]
    initdb = shutil.which("initdb")
    if initdb and (Path(initdb).parent / "pg_ctl").exists():
        return Path(initdb).parent
    return None


def as_server_user(command: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: as root, run them as the postgres user."""
    if os.geteuid() != 0:
        return command
    if shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--", *command]
    return ["su", "postgres", "-s", "/bin/sh", "-c", shlex.join(command)]


def server_folder() -> Path:
    """A temporary folder the PostgreSQL server user owns (pytest's own are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="gateway-faults-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    return folder


def run(command: list[str], *, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}: {result.stdout}{result.stderr}")
    return result


def missing_tools() -> str | None:
    """Why the private servers cannot run here, or None when they can."""
    if postgres_bin() is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql server package"
    if shutil.which("redis-server") is None:
        return "no redis-server: install the redis-server package"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run a private PostgreSQL as"
    return None


# ---------------------------------------------------------------- PostgreSQL and Redis of our own

class PrivatePostgres:
    """A cluster of our own in ``folder``: trust authentication, 127.0.0.1 only, its socket in its data dir."""

    def __init__(self, folder: Path, bin_dir: Path):
        self.data = folder / "data"
        self.log = folder / "postgres.log"
        self.bin = bin_dir
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def initdb(self) -> None:
        # --no-sync and fsync=off: a test cluster's durability does not matter, its speed does.
        run(as_server_user([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
                            "-E", "UTF8", "--no-sync"]))

    def _ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(as_server_user([str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log),
                            "-w", "-t", "30", *args]))

    def start(self) -> None:
        self._ctl("start")

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")

    def connect(self, database: str = DATABASE) -> psycopg.Connection:
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=database,
                               connect_timeout=5, autocommit=True)

    def shutdown(self) -> None:
        """Teardown: stop at once, whatever state the test left the server in; never raises."""
        with suppress(Exception):
            self._ctl("stop", "-m", "immediate")
        pid_file = self.data / "postmaster.pid"
        with suppress(Exception):  # pg_ctl could not stop it: the postmaster's id is in its own data dir
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)


class PrivateRedis:
    """A redis-server of our own: 127.0.0.1 only, nothing saved; killed, paused and resumed by its pid."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        self.paused = False

    def start(self) -> None:
        with open(self.folder / "redis.log", "ab") as log:
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(self.folder)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start: "
                                   f"{(self.folder / 'redis.log').read_text()[-1000:]}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        if self.paused:
            self.resume()
        self.process.kill()
        self.process.wait(10)


def manage_env(database_url: str, data_dir: Path, redis_url: str | None = None) -> dict:
    env = {**os.environ, "DATABASE_URL": database_url, "GATEWAY_DATA_DIR": str(data_dir)}
    env.pop("REDIS_URL", None)  # never the machine's shared Redis
    if redis_url:
        env["REDIS_URL"] = redis_url
    return env


def manage(*args: str, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "manage.py", *args]
    if check:
        return run(command, env=env, timeout=120)
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def issue_keys(env: dict, count: int) -> list[str]:
    """``count`` keys of the free tier, issued side by side (each command is a Python start-up)."""
    processes = [subprocess.Popen(
        [sys.executable, "manage.py", "issue_key", "--tier", "free", "--credits", str(CREDITS), "--rpm", "1000",
         "--rph", "10000", "--name", f"fault lane {lane}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for lane in range(count)]
    secrets = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        if process.returncode != 0:
            raise RuntimeError(f"issue_key failed: {err}")
        secrets.append(out.strip().splitlines()[-1])  # the secret is alone on the last line
    return secrets


@dataclass(frozen=True)
class Template:
    data: Path
    bin_dir: Path
    secrets: list[str]


@pytest.fixture(scope="session")
def template_cluster() -> Template:
    """A stopped cluster, migrated, seeded with the default catalog, holding LANES keys."""
    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    folder = server_folder()
    postgres = PrivatePostgres(folder, postgres_bin())
    try:
        postgres.initdb()
        postgres.start()
        with postgres.connect("postgres") as connection:
            connection.execute(f"CREATE DATABASE {DATABASE}")
        env = manage_env(postgres.url, folder / "var")
        manage("migrate", "--noinput", env=env)
        manage("seed_models", env=env)
        secrets = issue_keys(env, LANES)
        postgres.stop()  # a cleanly stopped cluster is a consistent copy
        yield Template(postgres.data, postgres.bin, secrets)
    finally:
        postgres.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


class Stack:
    """A test's own PostgreSQL and Redis, and how to point the gateway and its commands at them."""

    def __init__(self, postgres: PrivatePostgres, redis: PrivateRedis, secrets: list[str], data_dir: Path):
        self.postgres = postgres
        self.redis = redis
        self.secrets = secrets
        self.data_dir = data_dir
        self.log = data_dir / "server" / "gunicorn.log"

    def gateway_env(self, **extra: str) -> dict:
        return {"DATABASE_URL": self.postgres.url, "REDIS_URL": self.redis.url, **extra}

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return manage(*args, env=manage_env(self.postgres.url, self.data_dir / "manage", self.redis.url), check=check)

    def credits(self, secret: str) -> int:
        with self.postgres.connect() as connection:
            row = connection.execute("SELECT credits FROM keys_apikey WHERE digest = %s",
                                     [sha256(secret.encode()).hexdigest()]).fetchone()
        return row[0]

    def prices(self) -> dict[str, int]:
        """Each model's cost per request, as the catalog in the database has it."""
        with self.postgres.connect() as connection:
            return dict(connection.execute("SELECT model_id, cost FROM models_catalog_aimodel").fetchall())

    def pending_charges(self) -> int:
        with self.postgres.connect() as connection:
            return connection.execute("SELECT count(*) FROM keys_ledgerentry WHERE kind = 'charge' "
                                      "AND status = 'pending'").fetchone()[0]

    def reconcile(self) -> tuple[int, str]:
        """(exit code, last line) of manage.py reconcile against this stack's database."""
        result = self.manage("reconcile", check=False)
        lines = (result.stdout + result.stderr).strip().splitlines()
        return result.returncode, "; ".join(lines[-3:]) if result.returncode else lines[-1]

    def log_tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return "(no gunicorn log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture
def stack(template_cluster, tmp_path) -> Stack:
    folder = server_folder()
    postgres = PrivatePostgres(folder, template_cluster.bin_dir)
    redis = PrivateRedis(folder)
    try:
        run(["cp", "-a", str(template_cluster.data), str(postgres.data)])  # keeps the server user's ownership
        postgres.start()
        redis.start()
        yield Stack(postgres, redis, template_cluster.secrets, tmp_path)
    finally:
        redis.stop()
        postgres.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def serve(stack: Stack, **env: str):
    """The gateway under gunicorn with the production settings (REDIS_URL: gevent workers) on the stack."""
    with gunicorn(stack.data_dir / "server", workers=WORKERS, env=stack.gateway_env(**env)) as base:
        yield base


# ---------------------------------------------------------------- an upstream of our own

class _UpstreamServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # Connections this server resets, or the gateway drops, are the point of the tests.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _ChatHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        upstream = self.server.upstream
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if body.get("stream"):
            return self._stream(upstream)
        if upstream.resetting.is_set():
            return self._reset()
        payload = json.dumps(chat_completion()).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, upstream: "ChatUpstream"):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        upstream.streaming.add(self.client_address[1])
        try:
            for index in range(upstream.EVENTS):
                if index == 2 and upstream.resetting.is_set():
                    return self._reset()
                self._event(json.dumps(chunk(f"word{index} ")))
                time.sleep(upstream.GAP)
            self._event(json.dumps(usage_chunk()))
            self._event("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the gateway closed the stream before its end: its client went away
            upstream.count_closed_early()
            self.close_connection = True
        finally:
            upstream.streaming.discard(self.client_address[1])

    def _event(self, data: str):
        event = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")

    def _reset(self):
        # SO_LINGER 0 makes close() send a TCP reset instead of an orderly end of stream.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True


class ChatUpstream:
    """An OpenAI-compatible chat upstream on 127.0.0.1 that can reset its connections.

    Streams drip EVENTS events GAP seconds apart, so one is still open when a test cuts
    it from either end. While ``resetting`` is set every connection ends in a TCP reset:
    a stream after its second event, a plain request before any answer.
    """

    EVENTS = 20
    GAP = 0.05

    def __init__(self):
        self.resetting = threading.Event()
        self.closed_early = 0
        self.streaming: set[int] = set()  # the gateway's ports of the streams being sent right now
        self._lock = threading.Lock()
        self.server = _UpstreamServer(("127.0.0.1", 0), _ChatHandler)
        self.server.upstream = self
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def count_closed_early(self):
        with self._lock:
            self.closed_early += 1


@pytest.fixture
def chat_upstream():
    upstream = ChatUpstream()
    upstream.thread.start()
    yield upstream
    upstream.server.shutdown()
    upstream.server.server_close()


FAULTY_CATALOG = """
[providers.faulty]
base_url = "{base_url}"
api_key_env = "{secret_env}"
timeout = 5

[[models]]
id = "faulty-chat"
type = "chat"
owned_by = "faulty"
cost = 1
access = ["free"]
provider = "faulty"
"""


def seed_faulty_model(stack: Stack, upstream: ChatUpstream) -> dict:
    """Adds the faulty-chat model, served by ``upstream``; returns the gateway's environment for it."""
    path = stack.data_dir / "faulty_catalog.toml"
    path.write_text(FAULTY_CATALOG.format(base_url=upstream.base_url, secret_env=UPSTREAM_SECRET_ENV))
    stack.manage("seed_models", str(path))
    return {UPSTREAM_SECRET_ENV: "sk-fault-upstream-0123456789"}


# ---------------------------------------------------------------- the clients

@dataclass(frozen=True)
class Call:
    path: str
    body: dict

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


HELLO = [{"role": "user", "content": "Hello"}]
CHAT = Call("/v1/chat/completions", {"model": "local-chat", "messages": HELLO})
EMBEDDING = Call("/v1/embeddings", {"model": "local-embedding", "input": "Hello"})
STREAM = Call("/v1/chat/completions", {"model": "local-chat", "messages": HELLO, "stream": True})
FAULTY_CHAT = Call("/v1/chat/completions", {"model": "faulty-chat", "messages": HELLO})
FAULTY_STREAM = Call("/v1/chat/completions", {"model": "faulty-chat", "messages": HELLO, "stream": True})


@dataclass(frozen=True)
class Lane:
    """One client: its own key, and the calls it makes in turn."""

    secret: str
    calls: tuple[Call, ...]
    hangs_up: bool = False  # leaves each stream after its first event while the load's ``hang_up`` is set


def local_lanes(secrets: list[str]) -> list[Lane]:
    """The in-process models: chat and embeddings on six lanes, streams on two."""
    plain = [Lane(secret, (CHAT, EMBEDDING)) for secret in secrets[:6]]
    return plain + [Lane(secret, (STREAM,)) for secret in secrets[6:LANES]]


@dataclass
class Result:
    lane: int
    call: Call
    started: float  # seconds since the load began
    seconds: float
    status: int  # 0: no HTTP answer at all
    code: str | None = None  # the error code of the body or of a stream's error event; with no answer, the exception
    retry_after: str | None = None
    complete: bool = False  # the whole answer arrived: a JSON body, or a stream through [DONE] with no error event
    done: bool = False  # a stream's [DONE] arrived (after an error event too)
    hung_up: bool = False  # the client left the stream on purpose
    delivered: bool = False  # a stream's content reached the client (an event before any error event)
    remaining: int | None = None  # the balance the answer's X-Remaining-Credits told the client

    @property
    def succeeded(self) -> bool:
        return self.status == 200 and self.complete

    @property
    def charged(self) -> bool:
        """Whether the contract says this request costs its price: an answer served (a client that
        leaves a stream still pays for it, and so does one whose stream the gateway ended with an error
        event after content reached it), never a refusal or a failure before the first content. A
        stream cut with no error event is a worker that died: its charge is the sweeper's to refund."""
        return self.succeeded or self.hung_up or (self.delivered and self.code in ERROR_EVENT_CODES)

    @property
    def outcome(self) -> str:
        if self.status == 0:
            return f"no answer ({self.code})"
        if self.succeeded:
            return "200"
        if self.hung_up:
            return "200 hung up"
        if self.status == 200 and not self.call.stream:
            return "200 without an answer"
        if self.status == 200 and self.code in ERROR_EVENT_CODES:
            return f"200 then error {self.code}" + ("" if self.done else " and no [DONE]")
        if self.status == 200:
            return f"200 then cut ({self.code})"
        return f"{self.status} {self.code}"


ERROR_EVENT_CODES = ("upstream_unavailable", "upstream_timeout", "service_unavailable", "internal_error")


@dataclass
class Probe:
    started: float
    seconds: float
    status: int
    body: dict | None

    def check(self, name: str) -> str | None:
        return ((self.body or {}).get("checks") or {}).get(name, {}).get("status")

    @property
    def database(self) -> str | None:
        return self.check("database")

    @property
    def cache(self) -> str | None:
        return self.check("cache")


def _error_code(response: requests.Response) -> str | None:
    try:
        return response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return "not the error body"


def _is_answer(response: requests.Response) -> bool:
    """A chat completion or an embeddings list: what a 200 of the operations used here carries."""
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and bool(body.get("choices") or body.get("data"))


def _read_stream(response: requests.Response, result: Result, *, hang_up: bool) -> None:
    """Reads the events of a 200 stream into ``result``; leaves after the first one when ``hang_up``."""
    done = False
    try:
        for line in response.iter_lines():
            if not line.startswith(b"data: "):
                continue
            data = line[len(b"data: "):]
            if data == b"[DONE]":
                done = True
            elif data.startswith(b'{"error"'):
                result.code = (json.loads(data).get("error") or {}).get("code")
            else:
                result.delivered = True
                if hang_up:
                    result.hung_up = True
                    return
    except requests.RequestException as exc:
        result.code = type(exc).__name__
        return
    finally:
        response.close()
    result.done = done
    result.complete = done and result.code is None
    if not done and result.code is None:
        result.code = "ended without [DONE]"


class Load:
    """One thread per lane sending metered requests, and one polling /health, until the block ends.

    Every request has the client deadline; every loop is bounded in time as well as by the block.
    """

    MAX_SECONDS = 120

    def __init__(self, base: str, lanes: list[Lane], *, pace: float = PACE):
        self.base = base
        self.lanes = lanes
        self.pace = pace
        self.results: list[Result] = []
        self.health: list[Probe] = []
        self.hang_up = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.began = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.began

    def __enter__(self) -> "Load":
        self.began = time.monotonic()
        targets = [(self._client, (index,)) for index in range(len(self.lanes))] + [(self._poll_health, ())]
        for target, args in targets:
            thread = threading.Thread(target=target, args=args, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(DEADLINE + 5)
        assert not any(thread.is_alive() for thread in self._threads), "a client is still waiting past its deadline"

    def _running(self) -> bool:
        return not self._stop.is_set() and self.now() < self.MAX_SECONDS

    def _client(self, index: int) -> None:
        lane = self.lanes[index]
        with requests.Session() as session:
            session.headers["Authorization"] = f"Bearer {lane.secret}"
            turn = 0
            while self._running():
                began = time.monotonic()
                self.results.append(self._send(session, index, lane.calls[turn % len(lane.calls)]))
                turn += 1
                self._stop.wait(max(0.0, self.pace - (time.monotonic() - began)))

    def _send(self, session: requests.Session, index: int, call: Call) -> Result:
        began = time.monotonic()
        result = Result(lane=index, call=call, started=began - self.began, seconds=0.0, status=0)
        try:
            response = session.post(self.base + call.path, json=call.body, stream=call.stream,
                                    timeout=(DEADLINE, DEADLINE))
            result.status = response.status_code
            result.retry_after = response.headers.get("Retry-After")
            if (response.headers.get("X-Remaining-Credits") or "").isdigit():
                result.remaining = int(response.headers["X-Remaining-Credits"])
            if call.stream and response.status_code == 200:
                _read_stream(response, result, hang_up=self.lanes[index].hangs_up and self.hang_up.is_set())
            elif response.status_code == 200:
                result.complete = _is_answer(response)
            else:
                result.code = _error_code(response)
        except requests.RequestException as exc:
            result.code = type(exc).__name__
        result.seconds = time.monotonic() - began
        return result

    def _poll_health(self) -> None:
        while self._running():
            began = time.monotonic()
            try:
                response = requests.get(f"{self.base}/health", timeout=DEADLINE)
                status, body = response.status_code, response.json()
            except (requests.RequestException, ValueError):
                status, body = 0, None
            self.health.append(Probe(began - self.began, time.monotonic() - began, status, body))
            self._stop.wait(0.25)


# ---------------------------------------------------------------- judging what the clients saw

@dataclass
class Fault:
    """When a fault lasted, in seconds since the load began."""

    name: str
    start: float
    end: float = 0.0  # the dependency is back, or the fault stopped
    down: tuple[float, float] | None = None  # while the dependency itself was unreachable
    notes: list[str] = field(default_factory=list)

    def phase(self, started: float, seconds: float) -> str:
        if started + seconds <= self.start:
            return "before"
        if started >= self.end + RECOVERY:
            return "after"
        return "during"


def database_refusal(result: Result) -> bool:
    """The contract's answer while the database is unreachable: 503 service_unavailable with Retry-After."""
    return result.status == 503 and result.code == "service_unavailable" and bool(result.retry_after)


def nothing(result: Result) -> bool:
    return False


def longest(load: Load) -> float:
    return max(result.seconds for result in load.results)


def recovery(load: Load, fault: Fault) -> float:
    """How long after the fault ended a request could still fail: the start of the last failure."""
    failures = [result.started for result in load.results if not result.charged]
    return max([0.0] + [started - fault.end for started in failures])


def last_failure(load: Load, fault: Fault) -> str:
    """When the last failed request was answered, from the end of the fault."""
    ends = [result.started + result.seconds - fault.end for result in load.results if not result.charged]
    return f"{max(ends):+.2f}s" if ends else "none"


def report(load: Load, fault: Fault, reconciled: str) -> str:
    """The one-line summary of a fault, printed for the docs' table (visible with -s)."""
    outcomes = Counter(result.outcome for result in load.results)
    server_errors = sum(500 <= result.status < 600 for result in load.results)
    health = Counter(probe.status for probe in load.health)
    line = (f"FAULT {fault.name}: {len(load.results)} requests {dict(outcomes.most_common())}; 5xx {server_errors}; "
            f"longest {longest(load):.2f}s; recovery {recovery(load, fault):.2f}s (last failure answered "
            f"{last_failure(load, fault)}); /health {dict(health)}; reconcile: {reconciled}"
            + "".join(f"; {note}" for note in fault.notes))
    print(line)
    return line


def assert_clients_served(load: Load, fault: Fault, stack: Stack, *, tolerated=nothing) -> None:
    """No hang; before the fault and after the recovery window every request succeeded; during
    it every failure was one ``tolerated`` says the contract allows; and lanes ran after it."""
    problems = []
    if longest(load) >= DEADLINE:
        problems.append(f"a request took {longest(load):.2f}s: past the client deadline of {DEADLINE}s")
    for result in load.results:
        phase = fault.phase(result.started, result.seconds)
        if result.charged or (phase == "during" and tolerated(result)):
            continue
        problems.append(f"{phase}: {result.outcome} (retry-after {result.retry_after}) started at "
                        f"{result.started:.2f}s, took {result.seconds:.2f}s, {result.call.body['model']}"
                        f"{' stream' if result.call.stream else ''}")
    served_after = {result.lane for result in load.results
                    if fault.phase(result.started, result.seconds) == "after" and result.succeeded}
    if served_after != set(range(len(load.lanes))):
        problems.append(f"only lanes {sorted(served_after)} had a request succeed after the recovery window")
    assert not problems, (f"{fault.name}: {len(problems)} problem(s):\n" + "\n".join(problems[:25])
                          + f"\n--- gunicorn log ---\n{stack.log_tail()}")


def assert_health(load: Load, fault: Fault, stack: Stack, *, database_down: bool = False,
                  cache_down: bool = False, tolerated=nothing) -> None:
    """/health: 503 only while the database is down (and required then), 200 with the cache
    reported degraded while Redis is down, 200 and ok before the fault and after the recovery."""
    problems = []
    # Probes sent while the dependency was down (a database probe may wait out the pool's timeout).
    inside = [probe for probe in load.health if fault.down and fault.down[0] <= probe.started < fault.down[1]]
    for probe in load.health:
        phase = fault.phase(probe.started, probe.seconds)
        where = f"{phase} at {probe.started:.2f}s: {probe.status} {json.dumps(probe.body)}"
        if probe.status == 503 and not (database_down and phase == "during"):
            problems.append(f"503 while the database was up: {where}")
        elif probe.status == 503 and probe.database != "down":
            problems.append(f"503 without the database reported down: {where}")
        elif probe.status not in (200, 503) and not (phase == "during" and tolerated(probe)):
            problems.append(where)
        elif phase != "during" and (probe.body or {}).get("status") != "ok":
            problems.append(f"not ok outside the fault: {where}")
    # A probe that was still waiting on the pool when the server stopped (sent a moment before) may be
    # the one that answers 503; the next waits out the pool's timeout and may see the server back.
    overlapping = [probe for probe in load.health if fault.down
                   and probe.started < fault.down[1] and probe.started + probe.seconds > fault.down[0]]
    if database_down and fault.down and not any(probe.status == 503 for probe in overlapping):
        problems.append("no 503 while the database was down")
    if cache_down:
        if not inside:
            problems.append("no /health answer while the cache was down")
        for probe in inside:
            if probe.started + probe.seconds > fault.down[1]:
                continue  # the cache may have come back while it asked
            if probe.status != 200 or probe.cache != "degraded":
                problems.append(f"while the cache was down at {probe.started:.2f}s: {probe.status} "
                                f"{json.dumps(probe.body)} (want 200 with the cache degraded)")
    assert not problems, (f"{fault.name} /health: {len(problems)} problem(s):\n" + "\n".join(problems[:25])
                          + f"\n--- gunicorn log ---\n{stack.log_tail()}")


def assert_credits_add_up(load: Load, stack: Stack, *, unsure=nothing) -> None:
    """Each key's balance fell by the price of what its client was served, and no more: a refused
    or failed request costs nothing. A request ``unsure`` names may or may not have been charged
    (its worker died around the settlement), so it widens the range by its price."""
    problems = []
    prices = stack.prices()
    for index, lane in enumerate(load.lanes):
        results = [result for result in load.results if result.lane == index]
        charged = sum(prices[result.call.body["model"]] for result in results if result.charged)
        maybe = sum(prices[result.call.body["model"]] for result in results if not result.charged and unsure(result))
        fell = CREDITS - stack.credits(lane.secret)
        if not charged <= fell <= charged + maybe:
            problems.append(f"lane {index}: balance fell by {fell}, clients were served {charged} credit(s)"
                            + (f" (+ up to {maybe} unsure)" if maybe else "")
                            + f"; outcomes {dict(Counter(result.outcome for result in results))}")
    assert not problems, "credits do not add up:\n" + "\n".join(problems)


def assert_reconciled(reconcile: tuple[int, str], stack: Stack) -> None:
    code, output = reconcile
    assert code == 0, f"manage.py reconcile exited {code}: {output}\n--- gunicorn log ---\n{stack.log_tail()}"
