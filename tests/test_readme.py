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
