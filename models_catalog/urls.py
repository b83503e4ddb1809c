from django.urls import path

from models_catalog import views

urlpatterns = [
    path("v1/models", views.ModelListView.as_view(), name="models"),
    path("v1/statistic/key", views.KeyStatisticsView.as_view(), name="statistic-key"),
    path("v1/statistic/global", views.GlobalStatisticsView.as_view(), name="statistic-global"),
    path("benchmark", views.BenchmarkView.as_view(), name="benchmark"),
]
