"""Settings of the gateway, read from the environment (see README.md for every variable)."""
import secrets
from pathlib import Path
from typing import Any

from corsheaders.defaults import default_headers as cors_default_headers
from django.core.exceptions import ImproperlyConfigured

from utils_app.env import (
    cache_from_url,
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_rate,
    env_str,
    env_url,
    keep_sqlite_private,
)

BASE_DIR = Path(__file__).resolve().parent.parent

DATA_DIR = Path(env_str("GATEWAY_DATA_DIR", str(BASE_DIR / "var"))).resolve()
try:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
except OSError as exc:
    raise ImproperlyConfigured(f"GATEWAY_DATA_DIR {str(DATA_DIR)!r} cannot be created: {exc}") from None


def _secret_key() -> str:
    from_env = env_str("SECRET_KEY")
    if from_env:
        return from_env
    # Generated once and kept beside the database, so sessions and signed
    # values survive restarts without anyone having to invent a secret.
    path = DATA_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "*")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    # Before django.contrib.auth: its createsuperuser holds the staff password policy on every path
    # (keys/management/commands/createsuperuser.py), and of two commands of one name the earlier app's wins.
    "keys",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "corsheaders",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_ratelimit",
    # Staff sign-in: failed-login lockout and two-factor devices (keys/staff_security.py, keys/two_factor.py),
    # under headings of our own in the staff UI (keys/apps.py).
    "keys.apps.StaffLockoutsConfig",
    "django_otp",
    "keys.apps.StaffAuthenticatorAppsConfig",
    "keys.apps.StaffRecoveryCodesConfig",
    "utils_app",
    "models_catalog",
    "community",
    "gateway",
]

MIDDLEWARE = [
    # First: X-Request-ID on every answer (the 413 below included), the request's metrics and summary line.
    "utils_app.middleware.RequestIdMiddleware",
    "utils_app.middleware.BodySizeLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "utils_app.middleware.CorsMiddleware",
    # Django's session, CSRF, auth and messages middleware, skipped on API_PATH_PREFIXES.
    "utils_app.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "utils_app.middleware.CsrfViewMiddleware",
    "utils_app.middleware.AuthenticationMiddleware",
    # request.user.is_verified() and the staff two-factor rules; does nothing on API_PATH_PREFIXES.
    "keys.two_factor.TwoFactorMiddleware",
    "utils_app.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
# The JSON API, authenticated with bearer keys: no cookies, sessions or CSRF there
# (utils_app.middleware), and CORS on (CORS_URLS_REGEX below names the same prefixes).
API_PATH_PREFIXES = ("/v1/", "/utils/", "/v1beta/")  # /v1beta/: Google's Gemini API (gateway/gemini_views.py)
# What a request on those prefixes passes through (gateway/wsgi.py serves them with a handler of
# their own): MIDDLEWARE in its order, less the layers that do nothing there (the session, CSRF,
# authentication, two-factor and messages wrappers step aside on the API, and WhiteNoise serves
# only STATIC_URL). tests/utils_app/test_api_chain.py holds it to that.
API_MIDDLEWARE = [
    "utils_app.middleware.RequestIdMiddleware",
    "utils_app.middleware.BodySizeLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "utils_app.middleware.CorsMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "gateway.urls"
WSGI_APPLICATION = "gateway.wsgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_from_url(env_str("DATABASE_URL"), data_dir=DATA_DIR)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    keep_sqlite_private(Path(DATABASES["default"]["NAME"]))  # its owner's alone, as the secret key
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CACHES = {"default": cache_from_url(env_str("REDIS_URL"))}
SHARED_CACHE = bool(env_str("REDIS_URL"))

# Staff passwords (createsuperuser, the password-change form): long, not the username, not a common one.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Static files are served by WhiteNoise straight from the app folders, so the
# service works without a collectstatic step in development and tests.
WHITENOISE_USE_FINDERS = True
MEDIA_URL = "/media/"
MEDIA_ROOT = DATA_DIR / "media"

# Requests larger than this get 413 request_too_large before the body is read.
MAX_REQUEST_BYTES = env_int("MAX_REQUEST_BYTES", 20 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BYTES
# /v1/messages/count_tokens is free: larger bodies get 413 request_too_large before they are parsed, so one
# request's JSON parsing, translation and token count stay within what refusing a chat request costs.
COUNT_TOKENS_MAX_BYTES = env_int("COUNT_TOKENS_MAX_BYTES", 2 * 1024 * 1024, minimum=1024)
# The whole request body must arrive within this long (408 otherwise): a client that sends less
# than it announced cannot hold a worker's connection (utils_app.middleware.BodySizeLimitMiddleware).
BODY_READ_SECONDS = env_float("BODY_READ_SECONDS", 30.0, minimum=1.0)

PUBLIC_BASE_URL = env_str("PUBLIC_BASE_URL").rstrip("/")
DISCORD_API_BASE = env_url("DISCORD_API_BASE", "https://discord.com/api/v10")
DISCORD_BOT_TOKEN = env_str("DISCORD_BOT_TOKEN")
NEKO_API_URL = env_url("NEKO_API_URL", "https://nekos.best/api/v2/neko")
PUBLIC_RATE_LIMIT = env_rate("PUBLIC_RATE_LIMIT", "60/m")
CATALOG_CACHE_SECONDS = env_float("CATALOG_CACHE_SECONDS", 5.0)
MEDIA_RETENTION_HOURS = env_int("MEDIA_RETENTION_HOURS", 24, minimum=1)
# How long the Responses API keeps a stored response for previous_response_id and GET /v1/responses/{id}
# (gateway.responses); manage.py purge_responses and the ledger sweeper delete older ones.
RESPONSES_RETENTION_DAYS = env_int("RESPONSES_RETENTION_DAYS", 30, minimum=1)

# The request path (docs/ledger.md): how long a process trusts an authenticated key row,
# when a pending charge counts as abandoned (longer than any upstream call or stream may
# last), how often each process may sweep for such charges, and how large a response
# is kept for Idempotency-Key retries.
KEY_CACHE_SECONDS = env_float("KEY_CACHE_SECONDS", 1.0)
# With a shared cache, how long a key row may stay cached while no key changes (keys.auth_cache).
KEY_CACHE_MAX_SECONDS = env_float("KEY_CACHE_MAX_SECONDS", 60.0)
LEDGER_STALE_SECONDS = env_int("LEDGER_STALE_SECONDS", 900, minimum=1)
LEDGER_SWEEP_SECONDS = env_int("LEDGER_SWEEP_SECONDS", 60, minimum=0)
# On PostgreSQL, how many concurrent requests of a process one charge or one settlement statement may
# serve at most (gateway.metering: grouped like commits); 1 sends each request's statements alone.
METERING_GROUP_SIZE = env_int("METERING_GROUP_SIZE", 16, minimum=1, maximum=64)
# The request path's speed tricks (utils_app.speed), each on by default and each with its plain twin
# when off: same answers, more CPU (docs/performance.md, "The switches"; bench/pieces_cpu.py).
SPEED_REDIS_ROUND_TRIP = env_bool("SPEED_REDIS_ROUND_TRIP", True)
SPEED_ONE_PASS_VALIDATION = env_bool("SPEED_ONE_PASS_VALIDATION", True)
SPEED_STATEMENTS_ALONE = env_bool("SPEED_STATEMENTS_ALONE", True)
SPEED_LIBPQ = env_bool("SPEED_LIBPQ", True)
SPEED_UPSTREAM_POOL = env_bool("SPEED_UPSTREAM_POOL", True)
IDEMPOTENCY_MAX_BODY_BYTES = env_int("IDEMPOTENCY_MAX_BODY_BYTES", 4 * 1024 * 1024, minimum=0)
IDEMPOTENCY_HOURS = 24

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "utils_app.error_handler.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Model gateway API",
    "DESCRIPTION": "Metered, tier-based access to AI models.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "utils_app.schema.add_shared_errors"],
}

CORS_ALLOW_ALL_ORIGINS = env_str("CORS_ALLOWED_ORIGINS", "*") == "*"
CORS_ALLOWED_ORIGINS = [] if CORS_ALLOW_ALL_ORIGINS else env_list("CORS_ALLOWED_ORIGINS", "")
CORS_URLS_REGEX = r"^/(v1|v1beta|utils)/.*$"
# Preflights allow the headers clients send: the library's defaults (authorization, content-type…),
# the gateway's own, those of Anthropic's API, and those the official SDKs add to every request in a
# browser (their platform and retry headers, OpenAI's organization and project, Anthropic's opt-in to
# direct browser access): a browser refuses to send a request whose preflight leaves one out.
CORS_ALLOW_HEADERS = (
    *cors_default_headers, "idempotency-key", "x-request-id", "x-client-request-id", "x-api-key",
    "anthropic-version", "anthropic-beta", "anthropic-dangerous-direct-browser-access",
    "x-goog-api-key", "x-goog-api-client",
    "openai-organization", "openai-project", "openai-beta",
    *(f"x-stainless-{name}" for name in (
        "arch", "async", "lang", "os", "package-version", "runtime", "runtime-version", "retry-count",
        "timeout", "read-timeout", "helper-method", "stream-helper", "poll-helper", "custom-poll-interval")),
)
CORS_EXPOSE_HEADERS = [
    "X-Remaining-Credits",
    "X-RateLimit-Limit-Requests",
    "X-RateLimit-Remaining-Requests",
    "X-RateLimit-Reset-Requests",
    "Retry-After",
]

# django-ratelimit counts in the default cache; with no REDIS_URL that is
# process-local, which is why the embedded default runs one gunicorn worker.
RATELIMIT_USE_CACHE = "default"
RATELIMIT_FAIL_OPEN = True
# Our Redis cache (utils_app.speed.redis_round_trip.ScriptedRedisCache, Django's with scripts) counts with SET NX + INCR
# like Django's own, which the library supports but does not recognise under another class name;
# local memory is flagged as not shared, which is the documented single-process default.
SILENCED_SYSTEM_CHECKS = ["django_ratelimit.W001"] + ([] if SHARED_CACHE else ["django_ratelimit.E003"])

# Every line carries the request id (utils_app.logging); LOG_FORMAT (below) picks plain text or JSON.
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "utils_app.logging.RequestIdFilter"},
                "summarised": {"()": "utils_app.logging.SummarisedResponses"}},
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
                   "json": {"()": "utils_app.logging.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["request_id"]}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO").upper()},
    # Django's own line for an error answer repeats the request's summary line, without its reason.
    "loggers": {"django.request": {"level": "ERROR", "filters": ["summarised"]}},
}

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    SECURE_CONTENT_TYPE_NOSNIFF = True


# ---- Staff accounts and deployment security
# Decisions and the production set of variables: docs/staff-security.md.
# Sign-in lockout (django-axes): after STAFF_LOGIN_FAILURE_LIMIT failures of one username from one
# client address, that pair is refused for STAFF_LOGIN_COOLOFF_MINUTES; after
# STAFF_LOGIN_ADDRESS_FAILURE_LIMIT failures from one address over all usernames, the address is.
# Never the username everywhere: a stranger could then lock a staff member out from afar.
STAFF_LOGIN_FAILURE_LIMIT = env_int("STAFF_LOGIN_FAILURE_LIMIT", 5, minimum=1, maximum=1000)
STAFF_LOGIN_ADDRESS_FAILURE_LIMIT = env_int("STAFF_LOGIN_ADDRESS_FAILURE_LIMIT", 2 * STAFF_LOGIN_FAILURE_LIMIT,
                                            minimum=1, maximum=10000)
STAFF_LOGIN_COOLOFF_MINUTES = env_int("STAFF_LOGIN_COOLOFF_MINUTES", 15, minimum=1, maximum=7 * 24 * 60)
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out sign-in before any password check
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = STAFF_LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = STAFF_LOGIN_COOLOFF_MINUTES / 60  # hours
# What axes counts against AXES_FAILURE_LIMIT and clears on success: the pair. The address's own
# limit is added by the handler (keys.staff_security.StaffLockoutHandler).
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_HANDLER = "keys.staff_security.StaffLockoutHandler"
# A lockout ends one cool-off after it began: attempts during it are refused but not counted,
# so a guesser cannot keep a staff member out for longer by going on.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
# Failures are counted under the same client address as the public rate limit (utils_app/limits.py).
AXES_CLIENT_IP_CALLABLE = "keys.staff_security.client_address"
AXES_VERBOSE = False  # no start-up banner on every manage.py command; failures and lockouts are still logged
# Two-factor sign-in (django-otp): superusers must enrol an authenticator app when this is on.
STAFF_REQUIRE_2FA = env_bool("STAFF_REQUIRE_2FA", False)
OTP_TOTP_ISSUER = "Model gateway"
OTP_ADMIN_HIDE_SENSITIVE_DATA = True  # device secrets and recovery codes stay out of the staff UI
# TLS: all off on the embedded default (plain http on 127.0.0.1). Behind a TLS-terminating proxy
# that overwrites X-Forwarded-Proto, BEHIND_TLS_PROXY=1 makes such requests secure and turns the
# HTTPS redirect and secure-only cookies on unless those are set on their own.
BEHIND_TLS_PROXY = env_bool("BEHIND_TLS_PROXY", False)
if BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", BEHIND_TLS_PROXY)
SECURE_REDIRECT_EXEMPT = [r"^health$"]  # load balancers probe over plain http
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("SECURE_COOKIES", BEHIND_TLS_PROXY)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS += [
    # W003 looks for django.middleware.csrf.CsrfViewMiddleware by name; ours is that class unchanged,
    # only skipped on the bearer-key API paths (utils_app/middleware.py; tests/staff/test_deploy_check.py).
    "security.W003",
    # axes.W002 looks for AxesMiddleware, which only swaps a locked-out response for a generic page:
    # the staff login shows the lockout itself (keys/staff_security.py), so it is not installed.
    "axes.W002",
]

# ---- Request hardening (docs/hardening.md): caps on what one request may cost or carry,
# bounds on every upstream call, who may set the client address, which secrets providers may name.
from utils_app.env import env_names, env_networks, upstream_pool_size  # noqa: E402

# Proxies whose X-Forwarded-For is believed: the client is the right-most entry that is not one of them.
TRUSTED_PROXIES = env_networks("TRUSTED_PROXIES")
# Unknown API keys from one client address in a minute before it gets 429 without a key lookup.
AUTH_FAILURES_PER_MINUTE = env_int("AUTH_FAILURES_PER_MINUTE", 30, minimum=1)
MAX_CHAT_N = env_int("MAX_CHAT_N", 8, minimum=1, maximum=128)
MAX_CHAT_MESSAGES = env_int("MAX_CHAT_MESSAGES", 2048, minimum=1)
MAX_EMBEDDING_INPUTS = env_int("MAX_EMBEDDING_INPUTS", 2048, minimum=1, maximum=2048)
# Inputs x dimensions of one embeddings request (floats computed and sent back).
MAX_EMBEDDING_VALUES = env_int("MAX_EMBEDDING_VALUES", 1024 * 1024, minimum=4096)
# Image parts given by http(s) URL in one chat request: each is a fetch, by the gateway or by the upstream.
MAX_CHAT_IMAGE_URLS = env_int("MAX_CHAT_IMAGE_URLS", 32, minimum=0)
# Bytes the gateway fetches for one attempt's image URLs, all images together (Gemini takes images inline).
MAX_IMAGE_FETCH_BYTES = env_int("MAX_IMAGE_FETCH_BYTES", 10 * 1024 * 1024, minimum=64 * 1024)
# Schema objects of one chat request's JSON schemas (tools' parameters, response format), each $ref inlined.
MAX_SCHEMA_NODES = env_int("MAX_SCHEMA_NODES", 20000, minimum=100)
# ... and their size as JSON, each $ref inlined (descriptions and enums repeated with each inlining).
MAX_SCHEMA_BYTES = env_int("MAX_SCHEMA_BYTES", 2 * 1024 * 1024, minimum=16 * 1024)
# Largest upstream body read into memory (JSON answers, audio, fetched images, one stream event).
UPSTREAM_MAX_BYTES = env_int("UPSTREAM_MAX_BYTES", 32 * 1024 * 1024, minimum=64 * 1024)
# A streamed answer is ended with the contract's error event after this long, however lively.
STREAM_MAX_SECONDS = env_float("STREAM_MAX_SECONDS", 600.0, minimum=1.0)
# Whose failure it is (docs/routing.md): a request at most this large (bytes sent plus output tokens asked
# for, a bound on its tokens) that an upstream refuses on a token limit proves the deployment out of tokens.
UPSTREAM_SMALL_REQUEST_TOKENS = env_int("UPSTREAM_SMALL_REQUEST_TOKENS", 4096, minimum=1)
# The slowest output a working deployment writes: a request asking for more tokens than its time carries at
# this speed asked for a long answer, and its timeout is not held against a deployment that serves others.
UPSTREAM_MIN_TOKENS_PER_SECOND = env_float("UPSTREAM_MIN_TOKENS_PER_SECOND", 20.0, minimum=0.1)
# Keep-alive connections kept to each provider host: as many as a worker serves at once.
UPSTREAM_POOL_SIZE = upstream_pool_size()
# Upstream pools (docs/routing.md): the most attempts one request makes across its model's deployments,
# and how often one instance of the fleet probes disabled deployments to re-enable those that work again.
MAX_UPSTREAM_ATTEMPTS = env_int("MAX_UPSTREAM_ATTEMPTS", 3, minimum=1, maximum=20)
PROBE_SECONDS = env_int("PROBE_SECONDS", 300, minimum=0)
# Environment variables a provider may name as its secret, besides any GATEWAY_UPSTREAM_* name.
UPSTREAM_SECRET_ENV_ALLOW = env_names("UPSTREAM_SECRET_ENV_ALLOW", "OPENAI_API_KEY,ANTHROPIC_API_KEY,GEMINI_API_KEY")

# ---- Operability (docs/operations.md): Prometheus metrics at /metrics, request ids, structured logs.
# /metrics answers only the METRICS_TOKEN bearer token or a client address in METRICS_ALLOW; with
# neither set it does not exist (404). Under gunicorn the counts of all workers are added up
# (PROMETHEUS_MULTIPROC_DIR, set by gateway/gunicorn_conf.py).
from utils_app.env import env_networks  # noqa: E402

METRICS_TOKEN = env_str("METRICS_TOKEN")
METRICS_ALLOW = env_networks("METRICS_ALLOW")
# Prometheus usually scrapes each instance directly over plain http, as load balancers probe /health.
SECURE_REDIRECT_EXEMPT += [r"^metrics$"]
# plain: human-readable lines; json: one JSON object per line, one summary line per request.
LOG_FORMAT = env_str("LOG_FORMAT", "plain").lower()
if LOG_FORMAT not in LOGGING["formatters"]:
    raise ImproperlyConfigured(f"LOG_FORMAT must be plain or json, got {LOG_FORMAT!r}")
LOGGING["handlers"]["console"]["formatter"] = LOG_FORMAT
CORS_EXPOSE_HEADERS += ["X-Request-ID", "X-Client-Request-ID"]
