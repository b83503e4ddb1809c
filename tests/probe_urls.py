"""Small views used only by tests to probe the shared machinery (auth, errors) in isolation."""
from django.urls import include, path
from rest_framework.response import Response
from rest_framework.views import APIView

from gateway.urls import handler400, handler403, handler404, handler500  # noqa: F401
from keys.auth import BearerKeyAuthentication, HasApiKey, IsAdminKey
from utils_app.json_body import parse_json_object


class KeyView(APIView):
    authentication_classes = [BearerKeyAuthentication]
    permission_classes = [HasApiKey]

    def get(self, request):
        return Response({"prefix": request.user.prefix})


class AdminView(KeyView):
    permission_classes = [IsAdminKey]


class EchoView(APIView):
    def post(self, request):
        return Response({"received": parse_json_object(request.body)})


class BoomView(APIView):
    def get(self, request):
        raise RuntimeError("secret-internal-detail SELECT * FROM keys")


urlpatterns = [
    path("probe/key", KeyView.as_view()),
    path("probe/admin", AdminView.as_view()),
    path("probe/echo", EchoView.as_view()),
    path("probe/boom", BoomView.as_view()),
    path("", include("gateway.urls")),
]
