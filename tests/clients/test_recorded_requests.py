"""What each CLI version sends today, against the recording kept for it (tests/clients/recorded/): paths,
header names, body members, tool names and message kinds (volatile values left out). A new version, or a
changed request, shows as a diff here; `python -m tests.clients.recording <client>` writes the fixture again
once the diff is understood (and the gateway serves what changed)."""
from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.clients.agents import CLIS, Cli
from tests.clients.recording import fixture_path, record, shape

pytestmark = [pytest.mark.clients, pytest.mark.slow]


def _lines(value: Any) -> list[str]:
    return json.dumps(value, indent=1, sort_keys=True).splitlines()


@pytest.mark.parametrize("client", sorted(CLIS))
def test_the_cli_sends_what_its_recording_says(client: str, cli: Cli, tmp_path: Path) -> None:
    recorded = json.loads(fixture_path(cli).read_text())
    assert (recorded["package"], recorded["version"]) == (cli.package, cli.version), \
        f"no recording for {cli.package} {cli.version}: run python -m tests.clients.recording {client}"

    today = shape(record(cli, tmp_path))

    diff = list(difflib.unified_diff(_lines(recorded["shape"]), _lines(today), "recorded", "today", lineterm=""))
    assert not diff, "\n".join(diff)


@pytest.mark.parametrize("client", sorted(CLIS))
def test_the_recording_shows_a_streamed_request_and_the_tool_result_sent_back(client: str) -> None:
    """What the matrix's streaming column and the tool round trip rest on, for the recorded version."""
    cli = CLIS[client]
    recorded = json.loads(fixture_path(cli).read_text())

    def streams(request: dict[str, Any]) -> bool:
        body = request["body"] if isinstance(request["body"], dict) else {}
        return body.get("stream") is True or request["path"].endswith(":streamGenerateContent")

    assert all(streams(request) for request in recorded["one_turn"] + recorded["tool_round_trip"]
               if "tools" in (request["body"] or {})), [request["path"] for request in recorded["one_turn"]]
    last = recorded["tool_round_trip"][-1]
    assert "clients-ok-42" in json.dumps(last["body"]), "the tool's output is not in the client's last request"
