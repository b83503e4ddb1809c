"""The landing page: what the service is, the model catalog with costs and tiers, how to call it.

It lives on the top floor because it reads two apps below it (the catalog's snapshot and the
key tiers); utils_app, the ground floor, may import neither.
"""
import struct
import zlib
from functools import cache

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.renderers import TemplateHTMLRenderer
from rest_framework.response import Response

from keys.models import TIER_DESCRIPTIONS, TIERS
from models_catalog.catalog import snapshot
from models_catalog.models import MODEL_TYPES
from utils_app.error_handler import json_error
from utils_app.errors import MethodNotAllowed
from utils_app.limits import PublicAPIView
from utils_app.views import HtmlPage


def public_base_url(request) -> str:
    return settings.PUBLIC_BASE_URL or request.build_absolute_uri("/").rstrip("/")


def token_prices(model) -> list[tuple[str, str]]:
    """The model's token prices as the page writes them: (kind, credits per million tokens), none when unpriced."""
    prices = [("in", model.pricing_input), ("cached", model.pricing_cached_input), ("out", model.pricing_output)]
    if model.pricing_input is None:
        return []
    return [(kind, f"{price.normalize():,f}") for kind, price in prices if price is not None]


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
                    "prices": token_prices(model), "aliases": model.aliases or [],
                    "access": [model.allows_tier(tier) for tier in TIERS]} for model in models],
        "some_priced": any(model.pricing_input is not None for model in models),
        "tier_notes": [{"name": tier, "description": TIER_DESCRIPTIONS[tier],
                        "models": sum(model.allows_tier(tier) for model in models)} for tier in TIERS],
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


# ---------------------------------------------------------------- the favicon

# A gate in the page's accent colour: two posts and a lintel on a rounded square. Browsers ask every page's
# host for /favicon.ico (the staff pages, the API docs), so it is served there too, drawn from the same shape.
ICON_SIZE = 32
ICON_COLOUR, ICON_INK = (0x2F, 0x5F, 0xD0), (0xFF, 0xFF, 0xFF)
ICON_BARS = ((8, 8, 24, 12), (9, 12, 13, 25), (19, 12, 23, 25))  # (left, top, right, bottom), in pixels
FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    '<rect width="32" height="32" rx="7" fill="#2f5fd0"/>'
    + "".join(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="#fff"/>'
              for left, top, right, bottom in ICON_BARS)
    + "</svg>")


def _icon_pixel(x: int, y: int) -> tuple:
    """RGBA of one pixel of the icon: transparent beyond the rounded corners, ink on the bars."""
    corner = 7
    nearest_x, nearest_y = min(max(x, corner), ICON_SIZE - 1 - corner), min(max(y, corner), ICON_SIZE - 1 - corner)
    if (x - nearest_x) ** 2 + (y - nearest_y) ** 2 > corner ** 2:
        return (0, 0, 0, 0)
    inked = any(left <= x < right and top <= y < bottom for left, top, right, bottom in ICON_BARS)
    return (*(ICON_INK if inked else ICON_COLOUR), 255)


@cache
def favicon_ico() -> bytes:
    """The icon as an ICO file holding one 32x32 PNG (which every current browser reads)."""
    rows = b"".join(b"\x00" + bytes(channel for x in range(ICON_SIZE) for channel in _icon_pixel(x, y))
                    for y in range(ICON_SIZE))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", ICON_SIZE, ICON_SIZE, 8, 6, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))
    header = struct.pack("<HHH", 0, 1, 1)  # reserved, type 1 (icon), one image
    entry = struct.pack("<BBBBHHII", ICON_SIZE, ICON_SIZE, 0, 0, 1, 32, len(png), 6 + 16)
    return header + entry + png


def favicon(request, kind: str):
    """GET /favicon.ico and /favicon.svg: the same icon, cached for a day."""
    if request.method not in ("GET", "HEAD"):
        return json_error(MethodNotAllowed(f"Method {request.method} is not allowed here."))
    if kind == "svg":
        response = HttpResponse(FAVICON_SVG, content_type="image/svg+xml")
    else:
        response = HttpResponse(favicon_ico(), content_type="image/x-icon")
    response["Cache-Control"] = "public, max-age=86400"
    return response
