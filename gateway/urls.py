"""Root URLs: each app owns its paths; errors outside DRF views are JSON too."""
from django.contrib import admin
from django.urls import include, path

from gateway.deployment_views import DeploymentListView, DisableDeploymentView, EnableDeploymentView
from gateway.gemini_api.errors import error_body as google_error_body
from gateway.metrics import metrics_view
from gateway.site import LandingView, favicon
from keys.auth import name_sent_key
from utils_app import error_handler
from utils_app.errors import NotFound

urlpatterns = [
    # The metered operations first: resolving the request path's own URLs tries no other app's patterns.
    path("", include("gateway.operation_urls")),
    # Before the staff admin site: its catch-all would otherwise swallow /admin/update-key and friends.
    path("", include("keys.urls")),
    # Upstream pools: the admin API, and the staff page, which reads the routing's health and so lives up here
    # (gateway/deployment_views.py, gateway/deployment_pages.py). The id is any text so that a malformed one
    # is a 404 deployment_not_found, not the staff site's login page.
    path("admin/deployments", DeploymentListView.as_view(), name="admin-deployments"),
    path("admin/deployments/<str:id>/disable", DisableDeploymentView.as_view(), name="admin-disable-deployment"),
    path("admin/deployments/<str:id>/enable", EnableDeploymentView.as_view(), name="admin-enable-deployment"),
    path("admin/models_catalog/deployment/", include("gateway.deployment_pages")),
    # The staff login, password change and two-factor pages (keys/staff_urls.py) take precedence over the admin's.
    path("admin/", include("keys.staff_urls")),
    path("admin/", admin.site.urls),
    path("", include("models_catalog.urls")),
    path("", include("community.urls")),
    # The landing page reads the catalog and the key tiers, so it lives up here (gateway/site.py).
    path("", LandingView.as_view(), name="landing"),
    path("favicon.ico", favicon, {"kind": "ico"}, name="favicon"),
    path("favicon.svg", favicon, {"kind": "svg"}, name="favicon-svg"),
    path("", include("utils_app.urls")),
    path("metrics", metrics_view, name="metrics"),  # off (404) unless METRICS_TOKEN or METRICS_ALLOW is set
]

handler400 = "utils_app.error_handler.handler400"
handler403 = "utils_app.error_handler.handler403"
handler500 = "utils_app.error_handler.handler500"


def handler404(request, exception=None):
    """A path the service does not have: the JSON 404 of every unknown path, and the key the request sent
    named on its summary line (keys.auth.name_sent_key says what that may cost)."""
    name_sent_key(request)
    if request.path.startswith(GOOGLE_PATHS) or request.path in ("/v1beta", "/upload/v1beta"):
        # Only Google's API lives under v1beta/ (its uploads under upload/v1beta/): a Google client's call the
        # gateway does not serve (cachedContents, files) is answered in the shape that client reads.
        error = NotFound(f"No operation at {request.path}.")
        return error_handler.json_error(error, google_error_body(error))
    return error_handler.handler404(request, exception)


GOOGLE_PATHS = ("/v1beta/", "/upload/v1beta/")
