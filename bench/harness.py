"""What the bench scripts share: starting and stopping the fake upstreams, PostgreSQL and Redis servers
of the bench's own, and a gateway instance.

Everything binds 127.0.0.1, every wait is bounded, and every process is stopped by the PID this
module started it with (never by name). A gateway instance gets its own GATEWAY_DATA_DIR in a
temp dir; on PostgreSQL it uses the database named in its database URL (PG_URL unless given),
which it drops and creates afresh, and on Redis the db number in its Redis URL, which it empties.
The scripts run PostgreSQL + Redis on servers of their own (PrivatePostgres, PrivateRedis,
private_servers), never on the machine's shared ones.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
VENV_BIN = ROOT / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python")
CATALOG = BENCH / "catalog.toml"

# Ports given to the bench (18200-18299); the catalog names the two upstream ports.
FAST_UPSTREAM_PORT = 18201
STREAM_UPSTREAM_PORT = 18202
GATEWAY_PORTS = {"embedded": 18210, "postgres+redis": 18211}
FLOOR_PORT = 18219

# The bench's own PostgreSQL cluster and Redis server (PrivatePostgres, PrivateRedis), for the scripts
# that measure CPU or WAL per request: the machine's shared servers also serve other work. They take
# the first free port from these on.
PRIVATE_PG_PORT = 18220
PRIVATE_REDIS_PORT = 18221

PG_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gw_bench")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/5")


def stop_on_sigterm() -> None:
    """SIGTERM ends a script through its finally blocks, so the servers it started are stopped too.

    (A script started in the background by a non-interactive shell ignores SIGINT.)"""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def load_average() -> float:
    """The 1-minute load average: the scripts print it, because other work on the machine skews
    every figure (2 cores: a load above 2 means the bench was sharing them)."""
    return round(os.getloadavg()[0], 2)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used so far; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants (gunicorn's master and workers, nginx's master and worker)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def postgres_backends(database: str) -> list[int]:
    """PIDs of the PostgreSQL backends connected to ``database`` (the bench's own)."""
    parts = urlsplit(PG_URL)
    out = subprocess.run(
        ["psql", "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432), "-U",
         parts.username or "postgres", "-d", "postgres", "-Atc",
         f"SELECT pid FROM pg_stat_activity WHERE datname = '{database}'"],
        check=True, stdout=subprocess.PIPE, text=True).stdout
    return [int(line) for line in out.split()]


class CpuMeter:
    """CPU seconds used by groups of processes between start() and stop().

    Groups are functions returning PIDs, asked at both ends, so processes that appear during the
    run (a new database backend) count from zero. Processes that end during the run lose their
    share; gunicorn's workers and kept database connections do not end in a bench run.
    """

    def __init__(self, **groups):
        self.groups = groups
        self._before: dict[str, dict[int, float]] = {}

    def _sample(self) -> dict[str, dict[int, float]]:
        sample = {}
        for name, pids in self.groups.items():
            sample[name] = {pid: cpu for pid in pids() if (cpu := cpu_of(pid)) is not None}
        return sample

    def start(self) -> None:
        self._before = self._sample()

    def stop(self) -> dict[str, float]:
        after = self._sample()
        return {name: round(sum(cpu - self._before[name].get(pid, 0.0) for pid, cpu in pids.items()), 3)
                for name, pids in after.items()}


class Process:
    """A child process started in its own process group and stopped by that PID."""

    def __init__(self, name: str, args: list[str], *, env: dict | None = None, logfile: Path, cwd: Path = ROOT):
        self.name = name
        self.logfile = logfile
        self._log = open(logfile, "ab")
        self.popen = subprocess.Popen(args, env=env, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        log(f"started {name} (pid {self.popen.pid}), log {logfile}")

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 10) -> None:
        if self.alive():
            # The process group is the one this process leads (start_new_session), so this
            # reaches its own workers (gunicorn's, nginx's) and nothing else.
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(5)
            log(f"stopped {self.name} (pid {self.pid})")
        self._log.close()


def wait_for_port(port: int, *, timeout: float = 30, path: str = "/", process: Process | None = None) -> None:
    """Wait until something answers HTTP on 127.0.0.1:port (any status counts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and not process.alive():
            raise RuntimeError(f"{process.name} exited early; see {process.logfile}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing answered on 127.0.0.1:{port} within {timeout} s")


def require_tool(name: str, package: str) -> str:
    path = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
    if not path:
        raise SystemExit(f"{name} is missing: install it with `apt-get update && apt-get install -y {package}`")
    return path


def start_nginx(workdir: Path, port: int = FAST_UPSTREAM_PORT) -> Process:
    nginx = require_tool("nginx", "nginx-light")
    prefix = workdir / "nginx"
    prefix.mkdir(parents=True, exist_ok=True)
    conf = (BENCH / "upstream" / "nginx.conf.in").read_text()
    conf = conf.replace("@PREFIX@", str(prefix)).replace("@PORT@", str(port))
    (prefix / "nginx.conf").write_text(conf)
    process = Process("nginx fake upstream", [nginx, "-p", str(prefix), "-c", str(prefix / "nginx.conf")],
                      logfile=prefix / "stdout.log")
    wait_for_port(port, process=process)
    return process


def start_stream_upstream(workdir: Path, *, chunks: int, interval: float,
                          port: int = STREAM_UPSTREAM_PORT) -> Process:
    process = Process("streaming fake upstream",
                      [sys.executable, str(BENCH / "fake_upstream.py"), "--port", str(port),
                       "--chunks", str(chunks), "--interval", str(interval)],
                      logfile=workdir / "fake_upstream.log")
    wait_for_port(port, process=process)
    return process


def upstream_stats(port: int = STREAM_UPSTREAM_PORT, *, reset: bool = False) -> dict:
    """The streaming upstream's open and peak streams; ``reset`` starts a new peak."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats{'/reset' if reset else ''}", timeout=5) as response:
        return json.load(response)


def _reset_postgres(url: str) -> None:
    """Drop and create the bench database (it belongs to the bench alone)."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if not name.startswith("gw_bench"):
        raise SystemExit(f"refusing to drop {name!r}: the bench database must be named gw_bench…")
    base = ["psql", "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432),
            "-U", parts.username or "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-q", "-c"]
    subprocess.run(base + [f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], check=True)
    subprocess.run(base + [f'CREATE DATABASE "{name}"'], check=True)


def _reset_redis(url: str) -> None:
    """Empty the bench's own Redis db: db 5 of the shared server, or any db of the bench's private one."""
    import redis

    parts = urlsplit(url)
    db = int(parts.path.lstrip("/") or 0)
    if db != 5 and parts.port not in _private_redis_ports:
        raise SystemExit(f"refusing to flush Redis db {db}: the bench uses db 5, or a server of its own")
    redis.Redis.from_url(url).flushdb()


def free_port(start: int) -> int:
    """The first port from ``start`` on that nothing listens on (other benches on the machine take some)."""
    import socket

    for port in range(start, start + 40):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {start}-{start + 39}")


def _as_postgres_user(command: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: as root, run them as the postgres user."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


def postgres_bin() -> Path:
    """The newest PostgreSQL server binaries (Debian keeps them off PATH, a folder per major version)."""
    versions = sorted((int(folder.parent.name), folder) for folder in Path("/usr/lib/postgresql").glob("*/bin")
                      if folder.parent.name.isdigit() and (folder / "initdb").exists())
    if versions:
        return versions[-1][1]
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise SystemExit("no PostgreSQL server binaries (initdb, pg_ctl): install the postgresql package")


class PrivatePostgres:
    """A PostgreSQL cluster of the bench's own, on 127.0.0.1:PRIVATE_PG_PORT, trust authentication.

    The server's settings are its defaults, durability included (fsync, synchronous_commit and
    full_page_writes on, as in production): what a request costs the database includes waiting
    for its commits to reach the disk. Only max_connections is raised, so that several gateway
    instances, each opening its whole pool (DATABASE_MAX_CONNECTIONS, 90), can stay up side by side.
    The whole cluster belongs to the bench, so its processes' CPU and its WAL are the bench's alone.
    """

    def __init__(self, workdir: Path, *, port: int | None = None, max_connections: int = 400,
                 settings: dict[str, str] | None = None):
        self.folder = workdir / "postgres"
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(workdir, "postgres", "postgres")
            shutil.chown(self.folder, "postgres", "postgres")
        self.data = self.folder / "data"
        self.port = port or free_port(PRIVATE_PG_PORT)
        self.bin = postgres_bin()
        self.max_connections = max_connections
        self.settings = settings or {}  # more server settings, for a bench that reads the server's own figures

    def start(self) -> None:
        subprocess.run(_as_postgres_user([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                                          "-A", "trust", "-E", "UTF8"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=120)
        self._ctl("start")
        log(f"started a private PostgreSQL ({self.bin.parent.name}) on 127.0.0.1:{self.port}, "
            f"postmaster pid {self.pid}")

    def _ctl(self, *args: str) -> None:
        options = (f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 "
                   f"-c max_connections={self.max_connections}"
                   + "".join(f" -c {name}={value}" for name, value in self.settings.items()))
        subprocess.run(_as_postgres_user([str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options,
                                          "-l", str(self.folder / "postgres.log"), "-w", "-t", "60", *args]),
                       check=True, stdout=subprocess.DEVNULL, timeout=120)

    @property
    def pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def socket_url(self, database: str) -> str:
        """The same database through the server's Unix socket (in its data folder), as
        docs/operations.md recommends for a server on the gateway's own machine."""
        return f"postgres://postgres@/{database}?host={self.data}&port={self.port}"

    def processes(self) -> list[int]:
        """The postmaster and every process it started: backends, WAL writer, checkpointer, autovacuum."""
        return process_tree(self.pid)

    def query(self, sql: str, database: str = "postgres") -> list[list[str]]:
        out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database,
                              "-X", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-c", sql],
                             check=True, stdout=subprocess.PIPE, text=True, timeout=60).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def stop(self) -> None:
        try:
            pid = self.pid
        except OSError:
            return
        try:
            self._ctl("stop", "-m", "fast")
        except (subprocess.SubprocessError, OSError):
            os.kill(pid, signal.SIGKILL)  # the postmaster this object started, by its own PID file
        log(f"stopped the private PostgreSQL (pid {pid})")


_private_redis_ports: set[int] = set()


class PrivateRedis:
    """A redis-server of the bench's own on 127.0.0.1:PRIVATE_REDIS_PORT and a Unix socket in its folder,
    saving nothing to disk."""

    def __init__(self, workdir: Path, *, port: int | None = None):
        self.port = port or free_port(PRIVATE_REDIS_PORT)
        _private_redis_ports.add(self.port)
        self.folder = workdir / "redis"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.socket = self.folder / "redis.sock"
        self.process = Process("private Redis", [require_tool("redis-server", "redis-server"), "--port", str(self.port),
                                                 "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                                 "--unixsocket", str(self.socket), "--unixsocketperm", "700",
                                                 "--dir", str(self.folder)], logfile=self.folder / "redis.log")
        import redis

        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port, socket_timeout=1).ping()
                break
            except redis.RedisError:
                if time.monotonic() > deadline or not self.process.alive():
                    raise RuntimeError(f"the private Redis did not start; see {self.process.logfile}")
                time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.process.pid

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def socket_url(self, db: int) -> str:
        return f"unix://{self.socket}?db={db}"

    def stop(self) -> None:
        self.process.stop()


@contextmanager
def private_servers(workdir: Path, *, wanted: bool = True):
    """The bench's own PostgreSQL and Redis while the block runs: PG_URL and REDIS_URL point at them
    (database gw_bench, Redis db 5), so the scripts' PostgreSQL + Redis runs never touch the
    machine's shared servers. BENCH_DATABASE_URL in the environment keeps the servers it names."""
    global PG_URL, REDIS_URL
    if not wanted or os.environ.get("BENCH_DATABASE_URL"):
        yield
        return
    saved = PG_URL, REDIS_URL
    postgres = PrivatePostgres(workdir)
    redis_server = None
    try:
        postgres.start()
        redis_server = PrivateRedis(workdir)
        PG_URL, REDIS_URL = postgres.url("gw_bench"), redis_server.url(5)
        yield
    finally:
        PG_URL, REDIS_URL = saved
        if redis_server is not None:
            redis_server.stop()
        postgres.stop()


class Gateway:
    """One gateway instance served by gunicorn from the working tree, with its own data.

    ``source`` serves another copy of the project instead (an export of an older commit, say),
    with this tree's virtualenv, to compare the two under the same conditions.
    """

    def __init__(self, backend: str, workdir: Path, *, port: int | None = None, extra_env: dict | None = None,
                 source: Path = ROOT, database_url: str | None = None, redis_url: str | None = None):
        if backend not in GATEWAY_PORTS:
            raise ValueError(f"backend must be one of {', '.join(GATEWAY_PORTS)}")
        if not (Path(source) / "manage.py").is_file():
            raise ValueError(f"{source} is not a copy of the project (no manage.py)")
        self.backend = backend
        self.source = Path(source)
        self.database_url = database_url or PG_URL
        self.redis_url = redis_url or REDIS_URL
        self.port = port or GATEWAY_PORTS[backend]
        self.dir = workdir / backend.replace("+", "_")
        self.dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if k not in ("DATABASE_URL", "REDIS_URL", "WEB_CONCURRENCY", "GUNICORN_THREADS")}
        env.update({
            "GATEWAY_DATA_DIR": str(self.dir / "data"),
            "BIND": f"127.0.0.1:{self.port}",
            "GATEWAY_UPSTREAM_BENCH_KEY": "sk-bench-upstream",
            "CACHE_KEY_PREFIX": "gw_bench",
            "DJANGO_SETTINGS_MODULE": "gateway.settings",
        })
        if backend == "postgres+redis":
            env["DATABASE_URL"] = self.database_url
            env["REDIS_URL"] = self.redis_url
        env.update(extra_env or {})
        self.env = env
        self.process: Process | None = None
        self.keys_file = self.dir / "keys.txt"
        self.reconciled = ""

    def manage(self, *args: str, capture: bool = False) -> str:
        result = subprocess.run([PYTHON, "manage.py", *args], cwd=self.source, env=self.env, check=True,
                                stdout=subprocess.PIPE if capture else subprocess.DEVNULL, text=True)
        return result.stdout if capture else ""

    def prepare(self, *, keys: int, catalogs: tuple[Path, ...] = ()) -> list[str]:
        """Fresh database and cache, migrated and seeded with bench/catalog.toml (then each of
        ``catalogs``, which add to it), and `keys` keys."""
        if self.backend == "postgres+redis":
            _reset_postgres(self.database_url)
            _reset_redis(self.redis_url)
        log(f"{self.backend}: migrate, seed_models {CATALOG.name}, issue {keys} keys")
        self.manage("migrate", "--noinput")
        for catalog in (CATALOG, *catalogs):
            self.manage("seed_models", str(catalog))
        # One process issues all keys through the real issue_key command (a process per key
        # would spend a second each on start-up). rpm and rph are at their allowed maxima.
        script = (
            "import io\n"
            "from django.core.management import call_command\n"
            f"for i in range({keys}):\n"
            "    out = io.StringIO()\n"
            "    call_command('issue_key', tier='free', credits=10**9, rpm=1000, rph=10000,\n"
            "                 name=f'bench {i}', stdout=out)\n"
            "    print(out.getvalue().strip().splitlines()[-1])\n"
        )
        secrets = [line for line in self.manage("shell", "-c", script, capture=True).splitlines()
                   if line.startswith("sk-")]
        if len(secrets) != keys:
            raise RuntimeError(f"issued {len(secrets)} keys, expected {keys}")
        self.keys_file.write_text("\n".join(secrets) + "\n")
        return secrets

    def start(self) -> None:
        self.process = Process(
            f"gateway ({self.backend}) on :{self.port}",
            [str(VENV_BIN / "gunicorn"), "-c", "python:gateway.gunicorn_conf", "gateway.wsgi"],
            env=self.env, logfile=self.dir / "gunicorn.log", cwd=self.source)
        wait_for_port(self.port, path="/health", timeout=60, process=self.process)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
            self.reconcile()

    def reconcile(self) -> str:
        """Run `manage.py reconcile` on the run's database (every balance against its ledger) and log it.

        A benchmark run must end with every credit accounted for; a mismatch is reported, never hidden.
        """
        if not (self.source / "keys" / "management" / "commands" / "reconcile.py").is_file():
            return ""  # a copy of the project from before the ledger
        result = subprocess.run([PYTHON, "manage.py", "reconcile"], cwd=self.source, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        summary = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
        log(f"{self.backend} reconcile ({self.source.name}): {summary}"
            + ("" if result.returncode == 0 else f" [exit {result.returncode}]"))
        if result.returncode != 0:
            log(f"reconcile's whole output:\n{result.stdout}")  # a traceback's last line says little
        self.reconciled = summary if result.returncode == 0 else f"FAILED: {summary}"
        return self.reconciled

    def metering_groups(self) -> tuple[float, float] | None:
        """(statements, charges and settlements) the metering statements served so far, from the workers'
        Prometheus files (gateway_metering_group_size); None for a copy of the project without it."""
        from prometheus_client.multiprocess import MultiProcessCollector

        folder = self.dir / "data" / "prometheus"
        if not folder.is_dir():
            return None
        totals = None
        for metric in MultiProcessCollector(None, path=str(folder)).collect():
            if metric.name != "gateway_metering_group_size":
                continue
            totals = [0.0, 0.0]
            for sample in metric.samples:
                slot = {"gateway_metering_group_size_count": 0, "gateway_metering_group_size_sum": 1}.get(sample.name)
                if slot is not None:
                    totals[slot] += sample.value
        return None if totals is None else (totals[0], totals[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def workers_and_threads(self) -> tuple[int, int]:
        """What gateway/gunicorn_conf.py chose for this environment."""
        config = self.server_config()
        return config["workers"], config["threads"]

    def server_config(self) -> dict:
        """gateway/gunicorn_conf.py's choices for this environment (worker class, counts)."""
        code = ("import json, gateway.gunicorn_conf as c; print(json.dumps({'worker_class': c.worker_class, "
                "'workers': c.workers, 'threads': c.threads, "
                "'worker_connections': getattr(c, 'worker_connections', 1000)}))")
        out = subprocess.run([PYTHON, "-c", code], cwd=self.source, env=self.env, check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        return json.loads(out)

    def start_floor(self, port: int, *, pinned: bool = False) -> Process:
        """bench/floor_view.py under gunicorn with this gateway's worker settings, on ``port``; ``pinned``:
        each worker kept to a core of its own, as the gateway's gevent workers are by default.

        No access log: the floor is the least a service does per request (gunicorn formats and
        writes an access line even to /dev/null)."""
        config = self.server_config()
        cores = {"FLOOR_CORES": str(self.dir / f"floor-cores-{port}")} if pinned else {}
        process = Process(
            f"floor view on :{port}",
            [str(VENV_BIN / "gunicorn"), "--chdir", str(BENCH), "-b", f"127.0.0.1:{port}",
             "-k", config["worker_class"], "-w", str(config["workers"]), "--threads", str(config["threads"]),
             "--worker-connections", str(config["worker_connections"]), "floor_view:application"],
            env={**os.environ, "FLOOR_UPSTREAM": f"http://127.0.0.1:{FAST_UPSTREAM_PORT}/v1/chat/completions", **cores},
            logfile=self.dir / "floor.log")
        wait_for_port(port, process=process)
        return process


def make_workdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"gw_{prefix}_"))


def remove_workdir(workdir: Path, *, keep: bool) -> None:
    """Delete a run's temp dir (databases, logs) unless asked to keep it for a look."""
    if keep:
        log(f"kept {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
