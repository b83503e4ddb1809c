"""docs/architecture.md's walk of a streamed chat names exactly the project modules whose code runs for one.

A streamed chat completion is served through gateway.wsgi.application as gunicorn calls it, towards the
suite's fake OpenAI-compatible upstream, with the key row and the catalog snapshot already in the
process (the steady state: one request of the same kind goes first). Every function call whose code
lives in a project file (tests excluded) is recorded with sys.setprofile, from the WSGI call to the
close of the streamed body, where the stream is settled and its summary line written. The set of
those files must be the doc's table for the backend the test runs on.
"""
import json
import re
import sys
from pathlib import Path

from django.core import signals
from django.db import close_old_connections, connection
from django.test import RequestFactory

from gateway import wsgi
from keys.models import LedgerEntry
from models_catalog.models import UsageEvent
from tests.gateway.conftest import chunk, usage_chunk

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SECTION = "### The modules a streamed chat runs"
TESTS = ROOT / "tests"


def doc_table() -> dict[str, str]:
    """The section's table: {module path: the backend it runs on ("both" or "PostgreSQL")}."""
    section = DOC.read_text().split(SECTION, 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            rows[re.match(r"`([^`]+)`", cells[0]).group(1)] = cells[-1]
    return rows


def doc_counts() -> tuple[int, int]:
    section = " ".join(DOC.read_text().split(SECTION, 1)[1].split("\n#", 1)[0].split())  # lines joined
    found = re.search(r"(\d+) project modules run code for it on PostgreSQL \+ Redis, (\d+) on SQLite", section)
    return int(found.group(1)), int(found.group(2))


def serve(environ) -> tuple[str, bytes]:
    """One request through the served application, its streamed body read to the end and closed. As in
    Django's test client, the handler's signals leave the test's connection open."""
    answer = {}

    def start_response(status, headers, exc_info=None):
        answer["status"] = status

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        body = wsgi.application(environ, start_response)
        try:
            content = b"".join(body)
        finally:
            body.close()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
    return answer["status"], content


def modules_run(call) -> set[str]:
    """The project files (relative paths) whose functions ran during ``call()``."""
    seen = set()
    root, tests = f"{ROOT}/", f"{TESTS}/"

    def profile(frame, event, arg):
        if event == "call":
            filename = frame.f_code.co_filename
            if filename.startswith(root) and not filename.startswith(tests) and "/.venv/" not in filename:
                seen.add(filename[len(root):])

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


def test_the_architecture_walk_names_every_module_a_streamed_chat_runs_and_no_other(
        transactional_db, fake_models, upstream, make_key, settings):
    # The steady state the doc describes: the key row and the catalog snapshot stay in the process.
    settings.KEY_CACHE_SECONDS = settings.KEY_CACHE_MAX_SECONDS = settings.CATALOG_CACHE_SECONDS = 300
    _, secret = make_key(credits=100, max_credits=100, rpm=1000)
    body = json.dumps({"model": fake_models["chat"], "messages": [{"role": "user", "content": "Hi"}], "stream": True})

    def streamed_chat() -> tuple[str, bytes]:
        upstream.sse("/chat/completions", [chunk("Hel"), chunk("lo"), chunk(finish_reason="stop"), usage_chunk(5, 2),
                                           "[DONE]"])
        environ = RequestFactory().post("/v1/chat/completions", body, content_type="application/json",
                                        HTTP_AUTHORIZATION=f"Bearer {secret}").environ
        return serve(environ)

    assert streamed_chat()[0] == "200 OK"  # the warm-up: authenticates (the key cached), opens the connections
    answers = []
    ran = modules_run(lambda: answers.append(streamed_chat()))
    status, content = answers[0]
    assert status == "200 OK" and content.endswith(b"data: [DONE]\n\n")
    # The request went the whole way: charged, settled, its usage row written.
    assert LedgerEntry.objects.filter(kind="charge", status="completed").count() == 2
    assert UsageEvent.objects.filter(success=True).count() == 2

    table = doc_table()
    on_postgres = connection.vendor == "postgresql"
    expected = {module for module, backend in table.items() if backend == "both" or on_postgres}
    assert set(table.values()) <= {"both", "PostgreSQL"}
    assert sorted(ran - expected) == [], "runs for a streamed chat but is missing from docs/architecture.md"
    assert sorted(expected - ran) == [], "named in docs/architecture.md's table but runs no code for a streamed chat"
    assert doc_counts() == (len(table), sum(backend == "both" for backend in table.values()))
