"""The command-line agents, unchanged, against a served gateway: each answers one turn through `local-chat`
and makes a tool round trip (the model calls one of the agent's own tools, the agent runs it, the model
answers quoting its result), and the database holds a completed charge and a usage row per request."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.clients.agents import CLIS, CODEX_WEBSOCKETS, Cli
from tests.clients.conftest import Matrix, assert_metered

pytestmark = [pytest.mark.clients, pytest.mark.served]

# The inbound API each client speaks, as its ledger and usage rows name it. Anthropic's Messages API is
# metered like chat completions (CONTRACT section 8) and may name itself.
OPERATIONS = {"claude-code": {"chat", "messages"}, "codex": {"responses"}, "gemini-cli": {"gemini"},
              "opencode": {"chat"}}
# The shell makes the mark, so it appears only in the tool's output, never in the prompt the model quotes (and
# without `$(...)`, which Gemini CLI refuses to run).
TOOL_COMMAND = "printf clients-ok-%s 42"
MARK = "clients-ok-42"


@pytest.mark.parametrize("client", sorted(CLIS))
def test_the_agent_answers_one_turn(client: str, cli: Cli, gateway: str, client_key: Any, tmp_path: Path,
                                    matrix: Matrix) -> None:
    # Each of these CLIs always streams (its recorded request: tests/clients/test_recorded_requests.py).
    matrix.proves(cli.name, cli.version, "one-turn", "streaming")
    key, secret = client_key

    outcome = cli.run(gateway, secret, "Say hello to the clients suite.", tmp_path / "run")

    assert outcome.returncode == 0, outcome.describe()
    # local-chat's prose answer names it and quotes the last user message (whose first 200 characters may be
    # the context an agent puts before the prompt: docs/local-models.md).
    assert "This is local-chat" in outcome.stdout and "You wrote:" in outcome.stdout, outcome.describe()
    assert_metered(key, operations=OPERATIONS[client], at_least=1)


@pytest.mark.parametrize("client", sorted(CLIS))
def test_the_agent_runs_its_own_tool_and_answers_from_its_result(client: str, cli: Cli, gateway: str,
                                                                  client_key: Any, tmp_path: Path,
                                                                  matrix: Matrix) -> None:
    matrix.proves(cli.name, cli.version, "tool round trip")
    key, secret = client_key

    outcome = cli.run(gateway, secret, f"use {cli.tool}: {TOOL_COMMAND}", tmp_path / "run")

    assert outcome.returncode == 0, outcome.describe()
    assert MARK in outcome.stdout, outcome.describe()  # the tool ran and the model quoted its output
    assert_metered(key, operations=OPERATIONS[client], at_least=2)  # the call, then the answer


@pytest.mark.parametrize("client", ["codex"])
def test_codex_dialling_a_websocket_first_goes_on_over_http(client: str, cli: Cli, gateway: str, client_key: Any,
                                                             tmp_path: Path) -> None:
    """With `supports_websockets` Codex asks for GET /v1/responses with Upgrade: websocket first; only a 426
    makes it go on over HTTP in the same turn (CONTRACT section 9)."""
    key, secret = client_key

    outcome = CODEX_WEBSOCKETS.run(gateway, secret, "Say hello to the clients suite.", tmp_path / "run")

    assert outcome.returncode == 0, outcome.describe()
    assert "This is local-chat" in outcome.stdout, outcome.describe()
    assert_metered(key, operations=OPERATIONS[client], at_least=1)  # the refused upgrade is not charged
