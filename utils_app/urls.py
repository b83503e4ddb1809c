from django.urls import path
from django.views.generic import RedirectView

from utils_app import views

urlpatterns = [
    path("health", views.HealthView.as_view(), name="health"),
    path("utils/facts", views.FactsView.as_view(), name="facts"),
    path("v1/neko", views.NekoView.as_view(), name="neko"),
    path("v1/chat/cors-test", views.CorsTestView.as_view(), name="cors-test"),
    path("openapi.json", views.SchemaView.as_view(), name="openapi-schema"),
    path("docs", views.DocsView.as_view(), name="docs"),
    # The address typed with a slash, as browsers and habit often add one (the query kept).
    path("docs/", RedirectView.as_view(pattern_name="docs", permanent=True, query_string=True), name="docs-slash"),
]
