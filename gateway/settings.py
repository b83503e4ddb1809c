"""Settings of the gateway, read from the environment (see README.md for every variable)."""
import secrets
from pathlib import Path

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
    "utils_app",
    "keys",
    "models_catalog",
    "community",
    "gateway",
]

MIDDLEWARE = [
    "utils_app.middleware.BodySizeLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "corsheaders.middleware.CorsMiddleware",
    # Django's session, CSRF, auth and messages middleware, skipped on API_PATH_PREFIXES.
    "utils_app.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "utils_app.middleware.CsrfViewMiddleware",
    "utils_app.middleware.AuthenticationMiddleware",
    "utils_app.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
# The JSON API, authenticated with bearer keys: no cookies, sessions or CSRF there
# (utils_app.middleware), and CORS on (CORS_URLS_REGEX below names the same prefixes).
API_PATH_PREFIXES = ("/v1/", "/utils/")

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
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CACHES = {"default": cache_from_url(env_str("REDIS_URL"))}
SHARED_CACHE = bool(env_str("REDIS_URL"))

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
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

PUBLIC_BASE_URL = env_str("PUBLIC_BASE_URL").rstrip("/")
DISCORD_API_BASE = env_url("DISCORD_API_BASE", "https://discord.com/api/v10")
DISCORD_BOT_TOKEN = env_str("DISCORD_BOT_TOKEN")
NEKO_API_URL = env_url("NEKO_API_URL", "https://nekos.best/api/v2/neko")
PUBLIC_RATE_LIMIT = env_rate("PUBLIC_RATE_LIMIT", "60/m")
CATALOG_CACHE_SECONDS = env_float("CATALOG_CACHE_SECONDS", 5.0)
MEDIA_RETENTION_HOURS = env_int("MEDIA_RETENTION_HOURS", 24, minimum=1)

# The request path (docs/ledger.md): how long a process trusts an authenticated key row,
# when a pending charge counts as abandoned (longer than any upstream call or stream may
# last), how often each process may sweep for such charges, and how large a response
# is kept for Idempotency-Key retries.
KEY_CACHE_SECONDS = env_float("KEY_CACHE_SECONDS", 1.0)
LEDGER_STALE_SECONDS = env_int("LEDGER_STALE_SECONDS", 900, minimum=1)
LEDGER_SWEEP_SECONDS = env_int("LEDGER_SWEEP_SECONDS", 60, minimum=0)
IDEMPOTENCY_MAX_BODY_BYTES = env_int("IDEMPOTENCY_MAX_BODY_BYTES", 4 * 1024 * 1024, minimum=0)
IDEMPOTENCY_HOURS = 24

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "utils_app.errors.exception_handler",
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
CORS_URLS_REGEX = r"^/(v1|utils)/.*$"
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
# Our RedisCache (utils_app.cache) is atomic (SET NX + INCR) although the library does not list it;
# local memory is flagged as not shared, which is the documented single-process default.
SILENCED_SYSTEM_CHECKS = ["django_ratelimit.W001"] + ([] if SHARED_CACHE else ["django_ratelimit.E003"])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO").upper()},
    "loggers": {"django.request": {"level": "ERROR"}},
}

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
