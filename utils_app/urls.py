from django.urls import path

from utils_app import views

urlpatterns = [
    path("health", views.HealthView.as_view(), name="health"),
]
