"""The README's commands work when pasted into a shell on a fresh clone after `make run`."""
import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
SHELL_BLOCKS = re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def test_every_manage_py_command_runs_with_the_virtualenvs_python():
    # A bare `python manage.py` needs the virtualenv activated, which nothing in the README does.
    commands = [line for block in SHELL_BLOCKS for line in block.splitlines() if "manage.py" in line]
    commands += [code for code in re.findall(r"`([^`\n]+)`", README) if "manage.py " in code]
    assert commands
    for command in commands:
        assert re.search(r"(^|\$\()\.venv/bin/python manage\.py ", command.strip()), command


def test_every_variable_an_example_uses_is_set_before_it():
    assigned = set()
    for block in SHELL_BLOCKS:  # in the order a reader pastes them
        for line in block.splitlines():
            command = line.split("  #")[0]
            used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", command))
            assert used <= assigned, f"{sorted(used - assigned)} used before it is set: {line}"
            assigned |= set(re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", command))


def client_rows():
    section = README.split("## Clients\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row] for row in rows]


# The module a Python package is imported as, where its name on PyPI is another.
IMPORT_NAMES = {"google-genai": "google.genai|from google import genai", "openai-agents": "agents",
                "langchain-openai": "langchain_openai"}


def npm_pins() -> dict[str, str]:
    """The agent CLIs' npm packages and versions, as the client suite installs them."""
    from tests.clients.agents import CLIS

    return {cli.package: cli.version for cli in CLIS.values()}


def test_every_client_the_readme_names_is_pinned_at_its_version_and_driven_by_the_test_it_names():
    root = Path(__file__).resolve().parents[1]
    pins = dict(line.split("==") for line in (root / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    clis = npm_pins()
    rows = client_rows()
    assert rows
    for client, version, _how, _proves, tests in rows:
        package = re.match(r"`([^`]+)`", client).group(1)
        if package in clis:  # an agent CLI: driven by the client suite at the version it installs
            assert clis[package] == version, f"{package}: README says {version}, the suite installs {clis[package]}"
            for path in re.findall(r"`([^`]+\.py)`", tests):
                assert package in (root / path).read_text() or "CLIS" in (root / path).read_text(), path
            continue
        assert pins[package] == version, f"{package}: README says {version}, requirements.txt pins {pins[package]}"
        names = IMPORT_NAMES.get(package, package).replace(".", r"\.")
        for path in re.findall(r"`([^`]+\.py)`", tests):
            source = (root / path).read_text()
            assert re.search(rf"^\s*((import|from) ({names})\b|{names})", source, flags=re.M), \
                f"{path} does not use {package}"
