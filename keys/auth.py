"""Bearer-key authentication for DRF views (the key also as x-api-key for Anthropic's clients, and as
x-goog-api-key or ?key= for Google's)."""
from django.db import DatabaseError
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission

from keys import auth_cache
from keys.models import SECRET_PREFIX, ApiKey, digest_secret
from utils_app import limits
from utils_app import logging as request_log
from utils_app.errors import AuthenticationError, RateLimited


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


def _request_secret(request, *, query_key: bool = False) -> str | None:
    """The key from ``Authorization: Bearer``, else from ``x-api-key`` (as Anthropic's clients send it) or
    ``x-goog-api-key`` (as Google's do), else, for a view of Google's API (``query_key``), from ``?key=``.
    A key in a query string is read, never logged (utils_app.logging names the route, not the path)."""
    secret = _bearer_secret(request)
    if secret is None:
        secret = (request.META.get("HTTP_X_API_KEY", "").strip()
                  or request.META.get("HTTP_X_GOOG_API_KEY", "").strip() or None)
    if secret is None and query_key:
        secret = request.GET.get("key", "").strip() or None
    return secret


class BearerKeyAuthentication(BaseAuthentication):
    """Looks the key up by the SHA-256 digest of the secret: the process cache, else one indexed query.

    A metered view's cached row may be older than KEY_CACHE_SECONDS: its request limits
    (keys.limits.enforce, for views that declare ``counts_key_limits``) check the row against the
    shared keys version before using it.

    A view that needs the row as it is now sets ``fresh_key_lookup = True``: the admin API
    (a revoked admin key is refused at once, not after the cache's second) and a key's own
    statistics (its balance to the credit).

    An unknown key costs a lookup, so unknown keys are counted per client address
    (utils_app.limits): past AUTH_FAILURES_PER_MINUTE the address gets 429 for the rest of
    its minute, without a lookup, for every key this process does not hold. A key it holds
    keeps working, and a known key costs nothing more: only failures are counted.
    """

    def authenticate(self, request):
        view = request.parser_context.get("view")
        secret = _request_secret(request, query_key=getattr(view, "accepts_query_key", False))
        if secret is None:
            return None
        if not secret.startswith(SECRET_PREFIX) or len(secret) > 200:
            raise AuthenticationError("Invalid API key.", code="invalid_api_key")
        digest = digest_secret(secret)
        if limits.guessing_addresses() and not auth_cache.is_cached(digest):
            limits.refuse_known_guesser(request)
        if getattr(view, "fresh_key_lookup", False):
            key = ApiKey.objects.filter(digest=digest).first()
        elif getattr(view, "counts_key_limits", False):
            # The limits check that the cached row is still current (keys.auth_cache.current).
            key = auth_cache.key_with_digest(digest, within=auth_cache.longest_seconds())
        else:
            key = auth_cache.key_with_digest(digest)
        if key is None:
            limits.count_failed_authentication(request)
            raise AuthenticationError("Invalid API key.", code="invalid_api_key")
        if not key.is_active:
            raise AuthenticationError("This API key has been revoked.", code="invalid_api_key")
        return key, None

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


def name_sent_key(request) -> None:
    """Name the key a request sent on its summary line, where no view authenticated it: a 404 for a path
    the service does not have (the client's typo is easier to find by its key).

    Only a key that authenticates (known and active) is named, and finding it costs what a request's
    bearer authentication costs at most: nothing without a key (anonymous 404s stay free), nothing for a
    row this process read lately (the cache a metered request trusts), else one indexed read. An unknown
    key counts as a failed authentication of the client's address, and an address over that limit gets
    no lookup, so random keys on unknown paths cannot buy reads. The answer stays the 404 whatever
    happens here (a refusal, the database unavailable): the line then says ``key=-``.
    """
    try:
        secret = _request_secret(request)
    except AuthenticationError:
        return
    if secret is None or not secret.startswith(SECRET_PREFIX) or len(secret) > 200:
        return
    digest = digest_secret(secret)
    try:
        if limits.guessing_addresses() and not auth_cache.is_cached(digest):
            limits.refuse_known_guesser(request)
        key = auth_cache.key_with_digest(digest, within=auth_cache.longest_seconds())
        if key is None:
            limits.count_failed_authentication(request)
    except (RateLimited, DatabaseError):
        return
    line = request_log.current()
    if key is not None and key.is_active and line is not None:
        line.key = key.prefix


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
