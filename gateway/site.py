"""The landing page: what the service is, the model catalog with costs and tiers, how to call it.

It lives on the top floor because it reads two apps below it (the catalog's snapshot and the
key tiers); utils_app, the ground floor, may import neither.
"""
from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.renderers import TemplateHTMLRenderer
from rest_framework.response import Response

from keys.models import TIERS
from models_catalog.catalog import snapshot
from models_catalog.models import MODEL_TYPES
from utils_app.limits import PublicAPIView
from utils_app.views import HtmlPage


def public_base_url(request) -> str:
    return settings.PUBLIC_BASE_URL or request.build_absolute_uri("/").rstrip("/")


def landing_context(request) -> dict:
    """The catalog as the landing page shows it, read from the in-memory snapshot (no query when warm)."""
    models = sorted(snapshot().models.values(),
                    key=lambda model: (MODEL_TYPES.index(model.type), model.cost, model.model_id))
    configured = {model.model_id: model.is_configured(model.pool) for model in models}
    chat_models = [model for model in models if model.type == "chat"]
    # The examples name a model that works on this server and that a new (free) key may call, so they
    # work when pasted; failing that, the nearest to it (the first chat model of the sorted list).
    example = min(chat_models, default=None,
                  key=lambda model: (not configured[model.model_id], not model.allows_tier("free")))
    return {
        "base_url": public_base_url(request),
        "tiers": TIERS,
        "models": [{"id": model.model_id, "type": model.type, "owned_by": model.owned_by, "cost": model.cost,
                    "per_image": model.type == "image", "configured": configured[model.model_id],
                    "access": [model.allows_tier(tier) for tier in TIERS]} for model in models],
        "some_unconfigured": not all(configured.values()),
        "example_model": example.model_id if example else "MODEL_ID",
    }


class LandingView(HtmlPage, PublicAPIView):
    renderer_classes = [TemplateHTMLRenderer]

    @extend_schema(operation_id="landing", tags=["service"], summary="Landing page (HTML)",
                   description="The service, its model catalog with costs and tiers, and how to call it.",
                   responses={(200, "text/html"): OpenApiResponse(OpenApiTypes.STR, description="An HTML page.")})
    def get(self, request):
        return Response(landing_context(request), template_name="landing.html")
