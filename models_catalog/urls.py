from django.urls import path

from models_catalog import views

urlpatterns = [
    path("v1/models", views.ModelListView.as_view(), name="models"),
    # Any id the catalog holds, a slash included (organisation/model names).
    path("v1/models/<path:model_id>", views.ModelDetailView.as_view(), name="model"),
    path("v1/statistic/key", views.KeyStatisticsView.as_view(), name="statistic-key"),
    path("v1/statistic/global", views.GlobalStatisticsView.as_view(), name="statistic-global"),
    path("benchmark", views.BenchmarkView.as_view(), name="benchmark"),
]
