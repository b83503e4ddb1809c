"""The floor of bench/request_cpu.py: the least a Django REST framework service does per forwarded chat.

A bare DRF view, no middleware, no authentication, no metering: it parses the JSON body, posts it
to the fast upstream through one pooled requests session (which does not read the environment per
call) and renders the answer. Served by gunicorn with the gateway's own worker settings and no
access log, its throughput is what the framework and the stack allow; the gateway's figure divided
by it is what metering costs.

    gunicorn --chdir bench floor_view:application   (FLOOR_UPSTREAM names the upstream URL)

With FLOOR_CORES naming a file, each worker keeps to a core of its own, as the gateway's gevent
workers do by default (gateway/gunicorn_conf.py): the n-th worker to load the view takes the n-th
core, counted in that file (one byte a worker, under a lock).
"""
import fcntl
import os

import django
from django.conf import settings

UPSTREAM = os.environ.get("FLOOR_UPSTREAM", "http://127.0.0.1:18201/v1/chat/completions")


def keep_to_a_core_of_its_own(counter: str) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    with open(counter, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        taken = len(handle.read())
        handle.write(b"w")
    os.sched_setaffinity(0, {cpus[taken % len(cpus)]})


if os.environ.get("FLOOR_CORES"):
    keep_to_a_core_of_its_own(os.environ["FLOOR_CORES"])

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
