"""The client suite's fixtures: the pinned CLIs installed once per session, a served gateway per test on the
test database, a key, and the matrix of what each client does (written into docs/agents.md)."""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from models_catalog.models import UsageEvent
from tests.clients.agents import CLIS, REPO, Cli, npm_available
from tests.gateway.conftest import gunicorn, key_clear_of_window_edges

# LiteLLM fetches a price list from the internet when imported unless told to use its own copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

DOCS = REPO / "docs" / "agents.md"
CAPABILITIES = ("one-turn", "tool round trip", "streaming")


# ---------------------------------------------------------------- installing the CLIs

@pytest.fixture(scope="session")
def installed() -> dict[str, Cli | str]:
    """Each CLI installed at its pinned version (npm, once; an install already in .clients/ is reused), or
    the reason it could not be."""
    outcome: dict[str, Cli | str] = {}
    missing = [cli for cli in CLIS.values() if cli.installed_version != cli.version]
    unreachable = npm_available() if missing else None
    for cli in CLIS.values():
        if cli in missing and unreachable:
            outcome[cli.name] = unreachable
            continue
        cli.install()
        outcome[cli.name] = cli
    return outcome


@pytest.fixture
def cli(request: pytest.FixtureRequest, installed: dict[str, Cli | str]) -> Cli:
    """The CLI the test is parametrized with (`client`), installed; skipped only when npm cannot reach its
    registry for a version not installed yet."""
    found = installed[request.node.callspec.params["client"]]
    if isinstance(found, str):
        pytest.skip(found)
    return found


# ---------------------------------------------------------------- the served gateway and its key

@pytest.fixture
def gateway(request: pytest.FixtureRequest, transactional_db: None, seeded: Any, tmp_path: Path) -> Iterator[str]:
    """The gateway's base URL, serving the test database: under gunicorn in a subprocess on PostgreSQL (as it
    runs in production); on SQLite, whose test database lives in this process's memory, Django's live
    server thread serves it."""
    if connection.vendor == "postgresql":
        with gunicorn(tmp_path / "server", threads=8) as base:
            yield str(base)
    else:
        yield str(request.getfixturevalue("live_server").url)


@pytest.fixture
def client_key(make_key: Any) -> tuple[ApiKey, str]:
    """A key whose minute and hour windows cannot turn during a client's run (served processes read the real
    clock), with credits for every request an agent makes in one turn."""
    key, secret = key_clear_of_window_edges(make_key, margin=40.0, tier="premium", credits=200, max_credits=200,
                                            rpm=600)
    return key, secret


@dataclass
class Metered:
    """What the database holds about one key's requests after a client's run."""

    charges: list[tuple[str, int, str]]  # (status, amount, operation) of each charge, in order
    usage: list[tuple[str, int, bool, int, int]]  # (operation, status, success, input tokens, output tokens)
    mismatches: list[Any] = field(default_factory=list)

    def describe(self) -> str:
        return f"charges={self.charges} usage={self.usage} mismatches={self.mismatches}"


def metered(key: ApiKey) -> Metered:
    charges = list(LedgerEntry.objects.filter(key=key, kind="charge").order_by("id")
                   .values_list("status", "amount", "operation"))
    usage = list(UsageEvent.objects.filter(key=key).order_by("id")
                 .values_list("operation", "status", "success", "input_tokens", "output_tokens"))
    return Metered(charges, usage, mismatches())


def assert_metered(key: ApiKey, *, operations: set[str], at_least: int) -> Metered:
    """Every request the client made was charged once, completed, and has its usage row, under the inbound
    API's operation; the ledger adds up."""
    found = metered(key)
    assert len(found.charges) >= at_least, found.describe()
    assert all(status == "completed" and amount < 0 for status, amount, _ in found.charges), found.describe()
    assert {operation for _, _, operation in found.charges} <= operations, found.describe()
    assert len(found.usage) == len(found.charges), found.describe()
    assert all(operation in operations and status == 200 and success and tokens_in > 0 and tokens_out > 0
               for operation, status, success, tokens_in, tokens_out in found.usage), found.describe()
    assert found.mismatches == [], found.describe()
    return found


# ---------------------------------------------------------------- the matrix

@dataclass
class Cell:
    client: str
    version: str
    capability: str


class Matrix:
    """The cell (client, version, capability) a test proves; the session's hooks collect the outcomes."""

    def __init__(self) -> None:
        self.cells: list[Cell] = []

    def proves(self, client: str, version: str, *capabilities: str) -> None:
        for capability in capabilities:
            assert capability in CAPABILITIES, capability
            self.cells.append(Cell(client, version, capability))


@pytest.fixture
def matrix() -> Matrix:
    return Matrix()


_OUTCOMES: dict[tuple[str, str, str], str] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    funcargs = getattr(item, "funcargs", {})
    cells = funcargs["matrix"].cells if isinstance(funcargs.get("matrix"), Matrix) else []
    if report.when == "call" or report.outcome != "passed":
        for cell in cells:
            key = (cell.client, cell.version, cell.capability)
            verdict = "skipped" if report.skipped else ("yes" if report.passed else "fails")
            if _OUTCOMES.get(key) in (None, "yes") or verdict == "fails":  # "yes" only when all of it passed
                _OUTCOMES[key] = verdict
    return report


def read_table(text: str) -> dict[tuple[str, str, str], str]:
    """The cells of the table between the matrix markers."""
    found = re.search(r"<!-- matrix -->\n(.*?)\n?<!-- /matrix -->", text, flags=re.S)
    cells: dict[tuple[str, str, str], str] = {}
    for line in (found.group(1).splitlines() if found else [])[2:]:
        parts = [part.strip() for part in line.strip().strip("|").split("|")]
        if len(parts) == 2 + len(CAPABILITIES):
            for capability, value in zip(CAPABILITIES, parts[2:]):
                cells[(parts[0], parts[1], capability)] = value
    return cells


def matrix_table(outcomes: dict[tuple[str, str, str], str]) -> str:
    """The Markdown table: a row per client and version, a column per capability."""
    rows = sorted({(client, version) for client, version, _ in outcomes})
    lines = ["| Client | Version | " + " | ".join(CAPABILITIES) + " |",
             "|---|---|" + "---|" * len(CAPABILITIES)]
    for client, version in rows:
        cells = [outcomes.get((client, version, capability), "—") for capability in CAPABILITIES]
        lines.append(f"| {client} | {version} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def merged(table: dict[tuple[str, str, str], str],
           measured: dict[tuple[str, str, str], str]) -> dict[tuple[str, str, str], str]:
    """The page's cells with this run's measurements over them: a skipped cell keeps what the page says, and
    a client measured at another version loses its old row."""
    measured = {key: value for key, value in measured.items() if value != "skipped"}
    versions = {client: version for client, version, _ in measured}
    kept = {key: value for key, value in table.items() if versions.get(key[0], key[1]) == key[1]}
    return {**kept, **measured}


def write_matrix(measured: dict[tuple[str, str, str], str], docs: Path = DOCS) -> bool:
    """Puts the table, with this run's measurements, between the page's matrix markers; True when the page
    changed."""
    text = docs.read_text()
    table = matrix_table(merged(read_table(text), measured))
    updated = re.sub(r"(<!-- matrix -->\n).*?(\n?<!-- /matrix -->)",
                     lambda found: found.group(1) + table + "\n<!-- /matrix -->", text, count=1, flags=re.S)
    if updated == text:
        return False
    docs.write_text(updated)
    return True


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The matrix in docs/agents.md is what the suite measured last: each cell this run proved or failed is
    written (`yes`, `fails`); cells it skipped or did not select keep their value."""
    if _OUTCOMES and DOCS.exists() and write_matrix(_OUTCOMES):
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("docs/agents.md: the client matrix was rewritten from this run's results")
