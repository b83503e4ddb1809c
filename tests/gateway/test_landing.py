import html
import re

import pytest

from keys.models import TIERS
from models_catalog.models import AiModel

pytestmark = pytest.mark.django_db


def rows_of(page: str) -> dict:
    """Model id -> the text of each cell in its table row."""
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page, flags=re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
                 for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        if cells:
            rows[cells[0]] = cells
    return rows


def test_the_landing_page_lists_every_seeded_model_with_cost_and_tiers(client, seeded):
    response = client.get("/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    rows = rows_of(response.content.decode())
    assert set(rows) == set(seeded.models)
    for model in AiModel.objects.all():
        cells = rows[model.model_id]
        assert cells[1] == model.type and cells[2] == model.owned_by
        assert cells[3].startswith(f"{model.cost} credit")
        assert cells[4:] == ["✓" if tier in model.tiers else "·" for tier in TIERS]
    assert rows["local-image"][3].endswith("per image")


def test_the_examples_are_built_from_the_real_base_url(client, seeded):
    page = client.get("/", HTTP_HOST="gw.example.org").content.decode()
    assert "curl http://gw.example.org/v1/chat/completions" in page
    assert 'OpenAI(base_url="http://gw.example.org/v1"' in page
    # The example model is one a new free key may call.
    model = re.search(r'model="([^"]+)"', page).group(1)
    assert AiModel.objects.get(model_id=model).allows_tier("free")


def test_a_configured_public_base_url_wins(client, seeded, settings):
    settings.PUBLIC_BASE_URL = "https://api.example.com"
    page = client.get("/").content.decode()
    assert "curl https://api.example.com/v1/chat/completions" in page
    assert "testserver" not in page


def test_the_page_links_to_the_docs(client, seeded):
    page = client.get("/").content.decode()
    for target in ("/docs", "/openapi.json", "/v1/models"):
        assert f'href="{target}"' in page


def test_disabled_models_are_not_shown(client, seeded):
    AiModel.objects.filter(model_id="gpt-4.1").update(enabled=False)
    from models_catalog import catalog
    catalog.invalidate()
    assert "gpt-4.1" not in rows_of(client.get("/").content.decode())


def test_an_empty_catalog_says_how_to_load_one(client, db):
    page = client.get("/").content.decode()
    assert "seed_models" in page
    assert "MODEL_ID" in page


def test_the_page_reads_the_catalog_snapshot_without_queries(client, seeded, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert client.get("/").status_code == 200
