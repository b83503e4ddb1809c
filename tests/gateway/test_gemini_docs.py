"""The provider types' documentation (docs/providers.md) against the code it describes."""
import re
from pathlib import Path

import pytest

from models_catalog.catalog import parse_catalog
from models_catalog.provider_types import TYPES

DOC = Path(__file__).resolve().parents[2] / "docs" / "providers.md"
EXAMPLES = re.findall(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"example-{n}" for n in range(1, len(EXAMPLES) + 1)])
def test_every_worked_catalog_example_in_the_providers_doc_loads(example):
    providers, models = parse_catalog(example)
    assert providers and models


def test_the_providers_doc_has_a_worked_example_for_each_type_it_documents():
    documented = {kind for kind in TYPES if f"## `{kind}`" in DOC.read_text(encoding="utf-8")}
    assert {"openai", "azure", "anthropic", "gemini", "local"} <= documented
    typed = {provider["type"] for example in EXAMPLES for provider in parse_catalog(example)[0]}
    assert documented <= typed
