"""Bearer-key authentication for DRF views."""
from django.db import connections, router
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission

from keys.models import SECRET_PREFIX, ApiKey, digest_secret
from utils_app.errors import AuthenticationError


def _bearer_secret(request) -> str | None:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        return None
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret or " " in secret:
        raise AuthenticationError("Malformed Authorization header: expected 'Bearer <key>'.",
                                  code="missing_api_key")
    return secret


_lookup_statements: dict[tuple[str, str], str] = {}


def key_with_digest(digest: str) -> ApiKey | None:
    """The key whose secret has this digest, active or not, with every column: one indexed SELECT.

    Every keyed request starts here, so the SELECT that ``ApiKey.objects.get(digest=…)``
    compiles anew each time is compiled once per database and run as a raw query,
    which still builds a complete ApiKey as get() would (compiling the same query
    cost several times the lookup itself).
    """
    alias = router.db_for_read(ApiKey)
    cache_key = (alias, connections[alias].vendor)
    statement = _lookup_statements.get(cache_key)
    if statement is None:
        statement, _ = ApiKey.objects.using(alias).filter(digest="").query.sql_with_params()
        _lookup_statements[cache_key] = statement
    return next(iter(ApiKey.objects.raw(statement, [digest], using=alias)), None)


class BearerKeyAuthentication(BaseAuthentication):
    """Looks the key up by the SHA-256 digest of the secret: one indexed query."""

    def authenticate(self, request):
        secret = _bearer_secret(request)
        if secret is None:
            return None
        if not secret.startswith(SECRET_PREFIX) or len(secret) > 200:
            raise AuthenticationError("Invalid API key.", code="invalid_api_key")
        key = key_with_digest(digest_secret(secret))
        if key is None:
            raise AuthenticationError("Invalid API key.", code="invalid_api_key")
        if not key.is_active:
            raise AuthenticationError("This API key has been revoked.", code="invalid_api_key")
        return key, None

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class HasApiKey(BasePermission):
    def has_permission(self, request, view):
        if request.user is None:
            raise AuthenticationError("Missing API key: send 'Authorization: Bearer <key>'.",
                                      code="missing_api_key")
        return True


class IsAdminKey(HasApiKey):
    def has_permission(self, request, view):
        super().has_permission(request, view)
        if not request.user.is_admin:
            raise AuthenticationError("This operation needs an admin key.", code="admin_required")
        return True
