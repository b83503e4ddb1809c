"""What a CLI version sends, recorded against the capture server (tests/clients/capture.py) and reduced to
its shape: the fixture in tests/clients/recorded/<client>-<version>.json holds both, and
test_recorded_requests.py compares today's shape with it, so a new client version's changes are a diff.

Write the fixtures again (after a version bump, read the diff before committing it):
    python -m tests.clients.recording [client ...]
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.clients.agents import CLIS, Cli
from tests.clients.capture import ToolPlan, capture_server

RECORDED = Path(__file__).resolve().parent / "recorded"
ONE_TURN_PROMPT = "Say hello."
TOOL_TEXT = "echo clients-ok-42"

# Headers whose presence depends on the transport or the moment, not on the client's choices.
TRANSPORT_HEADERS = {"content-length", "connection", "host", "transfer-encoding", "expect", "keep-alive"}


def tool_prompt(cli: Cli) -> str:
    return f"use {cli.tool}: {TOOL_TEXT}"


def record(cli: Cli, place: Path) -> dict[str, Any]:
    """Runs the client twice against a capture server: a one-turn answer, and a turn in which the server
    calls the client's own tool once; returns the requests of each run."""
    runs: dict[str, Any] = {"client": cli.name, "package": cli.package, "version": cli.version}
    with capture_server() as (base, recorder):
        outcome = cli.run(base, "sk-capture-secret", ONE_TURN_PROMPT, place / "one-turn")
        assert outcome.returncode == 0, outcome.describe()
        runs["one_turn"] = recorder.requests
    with capture_server(ToolPlan(cli.tool, TOOL_TEXT)) as (base, recorder):
        outcome = cli.run(base, "sk-capture-secret", tool_prompt(cli), place / "tool")
        assert outcome.returncode == 0, outcome.describe()
        runs["tool_round_trip"] = recorder.requests
    # The temporary directory the client ran in (its home and working directory) shows in the prompts it
    # sends; the fixture names it by a placeholder.
    return shortened(json.loads(json.dumps(runs).replace(str(place), "<run-directory>")))


# The clients' own prose (system prompts, tool descriptions) is theirs, not the project's: a fixture keeps
# the shape of a request, and a text longer than this keeps only its first words and says how long it was.
# Header values are kept whole: they are lists of names (anthropic-beta), not prose.
LONGEST_TEXT = 160


def shortened(value: Any) -> Any:
    """``value`` with every string longer than LONGEST_TEXT replaced by a placeholder of the same kind."""
    if isinstance(value, str) and len(value) > LONGEST_TEXT:
        return f"{value[:24]}… <the client's text, {len(value)} characters>"
    if isinstance(value, list):
        return [shortened(item) for item in value]
    if isinstance(value, dict):
        return {name: item if name == "headers" else shortened(item) for name, item in value.items()}
    return value


def tool_names(body: dict[str, Any]) -> list[str]:
    """The names of a request's tools, whatever the API's shape of them (built-in tools by their type)."""
    names: list[str] = []
    for tool in body.get("tools") or []:
        declarations = tool.get("functionDeclarations") or tool.get("function_declarations")
        if declarations:
            names.extend(str(declared.get("name")) for declared in declarations)
        elif isinstance(tool.get("function"), dict):
            names.append(str(tool["function"].get("name")))
        else:
            names.append(str(tool.get("name") or tool.get("type")))
        names.extend(f"{key}:" for key in tool if key not in {"functionDeclarations", "function_declarations",
                                                                "function", "name", "type", "description",
                                                                "parameters", "input_schema", "strict"}
                     and not declarations and not isinstance(tool.get("function"), dict))
    return sorted(names)


def _messages(body: dict[str, Any]) -> list[Any]:
    for member in ("messages", "input", "contents"):
        value = body.get(member)
        if isinstance(value, list):
            return value
    return []


def request_shape(request: dict[str, Any]) -> dict[str, Any]:
    """The stable part of one recorded request: method, path, query names, header names, the body's members
    (and the members of its object members), tool names, and the roles, item types and part types of its
    messages. Values that change from run to run (ids, prompts, lengths, times) are left out."""
    body = request.get("body") if isinstance(request.get("body"), dict) else {}
    assert isinstance(body, dict)
    nested = sorted(f"{name}.{inner}" for name, value in body.items() if isinstance(value, dict)
                    and name not in {"client_metadata", "metadata"} for inner in value)
    kinds: set[str] = set()
    for message in _messages(body):
        if not isinstance(message, dict):
            continue
        kinds.add(f"role:{message.get('role')}" if "role" in message else f"item:{message.get('type')}")
        if "type" in message and "role" in message:
            kinds.add(f"item:{message['type']}")
        content = message.get("content", message.get("parts"))
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict):
                kinds.add(f"part:{part.get('type') or next(iter(part), '')}")
    return {"method": request["method"], "path": request["path"], "query": request["query"],
            "headers": sorted(set(request["headers"]) - TRANSPORT_HEADERS), "members": sorted(body),
            "nested": nested, "tools": tool_names(body), "messages": sorted(kinds)}


def shape(runs: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each run's request shapes, in a stable order (requests may overlap in time)."""
    return {run: sorted((request_shape(request) for request in runs[run]),
                        key=lambda item: json.dumps(item, sort_keys=True))
            for run in ("one_turn", "tool_round_trip")}


def fixture_path(cli: Cli) -> Path:
    return RECORDED / f"{cli.name}-{cli.version}.json"


def main(names: list[str]) -> None:
    for name in names or list(CLIS):
        cli = CLIS[name]
        cli.install()
        with tempfile.TemporaryDirectory() as place:
            runs = record(cli, Path(place))
        runs["shape"] = shape(runs)
        fixture_path(cli).write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
        print(f"recorded {fixture_path(cli).name}: {sum(len(runs[r]) for r in ('one_turn', 'tool_round_trip'))}"
              " requests")


if __name__ == "__main__":
    main(sys.argv[1:])
