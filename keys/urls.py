from django.urls import path

from keys import views

urlpatterns = [
    path("admin/update-key", views.UpdateKeyView.as_view(), name="admin-update-key"),
    path("admin/create-key", views.CreateKeyView.as_view(), name="admin-create-key"),
    path("admin/revoke-key", views.RevokeKeyView.as_view(), name="admin-revoke-key"),
]
