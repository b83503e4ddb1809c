from django.urls import path

from community import views

urlpatterns = [
    path("v1/community/invites", views.InviteView.as_view(), name="community-invites"),
    path("v1/community/guilds", views.GuildsView.as_view(), name="community-guilds"),
    path("v1/community/user", views.UserView.as_view(), name="community-user"),
]
