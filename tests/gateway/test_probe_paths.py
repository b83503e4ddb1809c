"""An image model's probe retrieves its upstream model by name: the name stays one path segment."""
import pytest
import responses

from gateway import upstream
from models_catalog.models import AiModel, Deployment
from tests.gateway.conftest import UPSTREAM_KEY_ENV, add_provider


@pytest.mark.django_db
@pytest.mark.parametrize("name, path", [
    ("gpt-image-1", "/v1/models/gpt-image-1"),
    ("org/image-model", "/v1/models/org%2Fimage-model"),
    ("../../admin?key=1#x", "/v1/models/..%2F..%2Fadmin%3Fkey%3D1%23x"),
])
def test_an_openai_image_probe_asks_for_the_model_by_name_and_nothing_else(monkeypatch, name, path):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, "sk-upstream-secret")
    provider = add_provider("images", "http://upstream.test/v1")
    model = AiModel.objects.create(model_id="pictures", type="image", owned_by="test", cost=1, tiers=["free"])
    deployment = Deployment.objects.create(model=model, provider=provider, secret_env=UPSTREAM_KEY_ENV,
                                           upstream_model=name)
    with responses.RequestsMock() as mock:
        mock.get("http://upstream.test" + path, json={"id": name, "object": "model"})
        upstream.adapter_for(deployment).probe("image")
        assert mock.calls[0].request.path_url == path
