"""Every repository path the README and docs/*.md name exists: they map the code, and a file renamed or
deleted must take its mentions with it."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The repository's own folders and top-level files: a backticked path that starts with one is a claim
# about the tree.
TOP = ("gateway", "keys", "models_catalog", "community", "utils_app", "tests", "bench", "docs", "templates", ".ci")
TOP_FILES = {"README.md", "Makefile", "requirements.txt", ".importlinter", "manage.py"}
# `path`, or `path::test_name` (the path is what comes before the "::").
CODE = re.compile(r"`([^`\s]+)")
# A file of the tree named outside backticks as well: a command in a shell block, a reference in prose.
FILE = re.compile(r"(?<![\w/.-])((?:" + "|".join(TOP[:-1]) + r")/[\w/.-]*\w\.(?:py|md|toml|lua|in|html|txt))")


def named_paths(text: str) -> set[str]:
    """The repository paths a text names: every backticked one (a folder ends with /) and every file."""
    paths = set()
    for found in CODE.findall(text):
        path = found.split("::")[0].rstrip(".,;:)")
        if path in TOP_FILES or (path.split("/")[0] in TOP and "/" in path):
            if not any(mark in path for mark in ("*", "…", "<", "{", "$")):  # a pattern is not a path
                paths.add(path)
    return paths | set(FILE.findall(text))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_path_a_document_names_exists(document):
    missing = sorted(path for path in named_paths(document.read_text()) if not (ROOT / path).exists())
    assert missing == [], f"{document.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_paths_are_found_in_backticks_and_in_commands():
    text = ("The upstreams were in `gateway/providers.py` (gone), tested by "
            "`tests/gateway/test_chat.py::test_x`; run `.venv/bin/python bench/chat_overhead.py`, see "
            "`docs/` and `utils_app/*.py`.\n\n    .venv/bin/python bench/profile_request.py --backend sqlite\n")
    assert named_paths(text) == {"gateway/providers.py", "tests/gateway/test_chat.py", "bench/chat_overhead.py",
                                 "docs/", "bench/profile_request.py"}


def test_the_documents_that_map_the_code_name_the_paths_they_should():
    # The check above means something only if the extraction finds what these documents name.
    for name, expected in (("docs/architecture.md", "gateway/services.py"),
                           ("docs/performance.md", "bench/request_cpu.py"),
                           ("README.md", "docs/architecture.md")):
        assert expected in named_paths((ROOT / name).read_text()), name
