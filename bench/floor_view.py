"""The floor of bench/chat_overhead.py: the least a Django REST framework service does per forwarded chat.

A bare DRF view, no middleware, no authentication, no metering: it parses the JSON body, posts it
to the fast upstream through one pooled requests session (which does not read the environment per
call) and renders the answer. Served by gunicorn with the gateway's own worker settings and no
access log, its throughput is what the framework and the stack allow; the gateway's figure divided
by it is what metering costs.

    gunicorn --chdir bench floor_view:application   (FLOOR_UPSTREAM names the upstream URL)
"""
import os

import django
from django.conf import settings

UPSTREAM = os.environ.get("FLOOR_UPSTREAM", "http://127.0.0.1:18201/v1/chat/completions")

settings.configure(
    DEBUG=False, SECRET_KEY="bench-floor-only", ALLOWED_HOSTS=["127.0.0.1"], ROOT_URLCONF=__name__,
    MIDDLEWARE=[], INSTALLED_APPS=["rest_framework"], USE_TZ=True,
    REST_FRAMEWORK={"DEFAULT_AUTHENTICATION_CLASSES": [], "DEFAULT_PERMISSION_CLASSES": [],
                    "UNAUTHENTICATED_USER": None,
                    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
                    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"]},
)
django.setup()

import requests  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.urls import path  # noqa: E402
from requests.adapters import HTTPAdapter  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

session = requests.Session()
session.mount("http://", HTTPAdapter(pool_connections=1, pool_maxsize=256, max_retries=0))
# Not the proxy variables, NO_PROXY and the CA bundle read from the environment on every call (about
# 0.17 ms per call, which the gateway's own sessions do not pay: utils_app/http.py reads them once).
session.trust_env = False


class Forward(APIView):
    def post(self, request):
        upstream = session.post(UPSTREAM, json={**request.data, "model": "bench-upstream"}, timeout=10)
        return Response(upstream.json(), status=upstream.status_code)


urlpatterns = [path("v1/chat/completions", Forward.as_view())]
application = get_wsgi_application()
