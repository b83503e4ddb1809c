"""The client matrix in docs/agents.md: what a run measured replaces what the page said, cell by cell."""
from pathlib import Path

from tests.clients.conftest import CAPABILITIES, DOCS, merged, read_table, write_matrix

PAGE = """# Agents

Intro.

<!-- matrix -->
| Client | Version | one-turn | tool round trip | streaming |
|---|---|---|---|---|
| codex | 0.170.0 | yes | yes | yes |
| litellm | 1.0.0 | yes | fails | yes |
<!-- /matrix -->

## Codex
Settings written by hand stay as they are.
"""


def test_a_run_rewrites_the_cells_it_measured_and_keeps_the_others(tmp_path: Path) -> None:
    page = tmp_path / "agents.md"
    page.write_text(PAGE)

    changed = write_matrix({("codex", "0.171.0", "one-turn"): "yes",
                            ("codex", "0.171.0", "tool round trip"): "fails",
                            ("litellm", "1.0.0", "tool round trip"): "yes",
                            ("litellm", "1.0.0", "streaming"): "skipped"}, page)

    assert changed
    text = page.read_text()
    assert "| codex | 0.171.0 | yes | fails | — |" in text
    assert "0.170.0" not in text  # a client measured at another version loses its old row
    assert "| litellm | 1.0.0 | yes | yes | yes |" in text  # a skipped cell keeps what the page said
    assert text.startswith("# Agents\n\nIntro.\n")
    assert text.endswith("## Codex\nSettings written by hand stay as they are.\n")
    assert not write_matrix({("litellm", "1.0.0", "streaming"): "yes"}, page)  # nothing new: the page is left alone


def test_the_committed_page_has_the_markers_and_a_cell_for_every_capability() -> None:
    cells = read_table(DOCS.read_text())

    assert cells, "docs/agents.md has no matrix between <!-- matrix --> and <!-- /matrix -->"
    rows = {(client, version) for client, version, _ in cells}
    assert all((client, version, capability) in cells for client, version in rows for capability in CAPABILITIES)
    assert merged(cells, {}) == cells
