from django.urls import path

from utils_app import views

urlpatterns = [
    path("health", views.HealthView.as_view(), name="health"),
    path("utils/facts", views.FactsView.as_view(), name="facts"),
    path("v1/neko", views.NekoView.as_view(), name="neko"),
    path("v1/chat/cors-test", views.CorsTestView.as_view(), name="cors-test"),
    path("openapi.json", views.SchemaView.as_view(), name="openapi-schema"),
    path("docs", views.DocsView.as_view(), name="docs"),
]
