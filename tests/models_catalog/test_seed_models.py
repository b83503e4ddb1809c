import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from models_catalog import catalog
from models_catalog.models import AiModel, Provider

pytestmark = pytest.mark.django_db


def test_the_default_catalog_has_openai_and_local_models_of_every_type(capsys):
    call_command("seed_models")
    out = capsys.readouterr().out
    assert "created: model local-chat" in out
    local = AiModel.objects.filter(deployments__provider__type="local")
    assert sorted(local.values_list("type", flat=True)) == ["chat", "embedding", "image", "speech"]
    assert set(local.values_list("owned_by", flat=True)) == {"local"}
    assert AiModel.objects.filter(deployments__provider__name="openai", type="chat").exists()
    assert Provider.objects.get(name="openai").api_key_env == "OPENAI_API_KEY"


def test_seeding_twice_changes_nothing(capsys):
    call_command("seed_models")
    capsys.readouterr()
    call_command("seed_models")
    assert "0 created, 0 updated" in capsys.readouterr().out


def test_a_catalog_file_updates_existing_models(tmp_path, capsys):
    call_command("seed_models")
    path = tmp_path / "catalog.toml"
    path.write_text("""
[providers.local]
type = "local"

[[models]]
id = "local-chat"
type = "chat"
owned_by = "local"
cost = 7
access = ["premium"]
provider = "local"
upstream_model = "echo"
""")
    call_command("seed_models", str(path))
    assert "updated: model local-chat" in capsys.readouterr().out
    model = AiModel.objects.get(model_id="local-chat")
    assert (model.cost, model.tiers, model.deployments.get().upstream_name) == (7, ["premium"], "echo")
    assert model.access_map() == {"free": False, "augmented": False, "premium": True, "cool": False,
                                  "partner": False, "limited": False, "exclusive": False, "special": False}


BASE = '[providers.p]\nbase_url = "https://up.example/v1"\n'
GOOD_MODEL = 'id = "m"\ntype = "chat"\nowned_by = "x"\ncost = 1\naccess = ["free"]\nprovider = "p"\n'


@pytest.mark.parametrize("text, message", [
    ("[[models]\n", "not valid TOML"),
    (BASE + "[[models]]\n" + GOOD_MODEL.replace('cost = 1', 'cost = "one"'), "'cost' must be int"),
    (BASE + "[[models]]\n" + GOOD_MODEL.replace('cost = 1', 'cost = -2'), "'cost' must be 0 or more"),
    (BASE + "[[models]]\n" + GOOD_MODEL.replace('type = "chat"', 'type = "video"'), "'type' must be one of"),
    (BASE + "[[models]]\n" + GOOD_MODEL.replace('["free"]', '["gold"]'), "unknown tier 'gold'"),
    (BASE + "[[models]]\n" + GOOD_MODEL.replace('provider = "p"', 'provider = "q"'), "unknown provider 'q'"),
    (BASE + "[[models]]\n" + GOOD_MODEL.replace('owned_by = "x"\n', ''), "field 'owned_by' is missing"),
    (BASE + "[[models]]\n" + GOOD_MODEL + "colour = 1\n", "unknown field(s): colour"),
    (BASE + "[[models]]\n" + GOOD_MODEL + "[[models]]\n" + GOOD_MODEL, "#2 (id 'm'): field 'id' is a duplicate"),
    ('[providers.p]\nbase_url = "api.example"\n[[models]]\n' + GOOD_MODEL, "'base_url' must be an http(s) URL"),
    (BASE + "[[models]]\n" + GOOD_MODEL.replace('id = "m"', 'id = ""'), "field 'id' must not be empty"),
    (BASE + "[[models]]\n" + GOOD_MODEL.replace('cost = 1', 'cost = 4294967296'), "'cost' must be 2147483647 or less"),
    (BASE + "[[models]]\n" + GOOD_MODEL.replace('provider = "p"\n', '') + '[[models.deployments]]\nprovider = "p"\n'
     'priority = 40000\n', "field 'priority' must be 32767 or less"),
    (BASE + "[[models]]\n" + GOOD_MODEL + 'fallbacks = ["p"]\n', "field 'fallbacks' names provider 'p' twice"),
])
def test_a_bad_catalog_fails_naming_the_entry_and_field(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(CommandError) as raised:
        call_command("seed_models", str(path))
    assert message in str(raised.value)
    assert AiModel.objects.count() == 0


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        call_command("seed_models", str(tmp_path / "nope.toml"))


def test_the_snapshot_sees_a_saved_change_at_once(seeded):
    assert catalog.get_model("local-chat").cost == 1
    AiModel.objects.filter(model_id="local-chat").first().__class__  # noqa: B018
    model = AiModel.objects.get(model_id="local-chat")
    model.enabled = False
    model.save()
    assert catalog.get_model("local-chat") is None


def test_the_snapshot_costs_no_query_once_loaded(seeded, django_assert_num_queries):
    catalog.snapshot()
    with django_assert_num_queries(0):
        assert catalog.get_model("local-image").type == "image"
