"""The staff sign-in: lockout after repeated failures, the second factor, and lifting a lockout.

django-axes records failed sign-ins per username and client address, and its
authentication backend refuses every password, the right one included, for
STAFF_LOGIN_COOLOFF_MINUTES once a lockout began. Two limits start one
(StaffLockoutHandler): STAFF_LOGIN_FAILURE_LIMIT failures of one username from one
address lock that pair, and STAFF_LOGIN_ADDRESS_FAILURE_LIMIT failures from one address,
whatever the usernames, lock the address. A stranger elsewhere therefore cannot lock a
staff member out of their own address. This module shows the lockout on the login page
itself, counts wrong second-factor codes and wrong current passwords on the
password-change form as failures too, writes one audit entry per lockout of a real
account or of an address, and is what ``manage.py unlock_staff`` calls.

The login and password-change views replace the admin site's own at the same
addresses (keys/staff_urls.py, listed before the admin in gateway/urls.py).
"""
import ipaddress
from typing import NamedTuple

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from axes.signals import user_locked_out
from axes.utils import reset
from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm, AdminPasswordChangeForm
from django.contrib.auth import REDIRECT_FIELD_NAME, get_user_model
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.signals import user_login_failed
from django.contrib.auth.views import LoginView, PasswordChangeView
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.core.validators import MaxLengthValidator
from django.db.models import Q, Sum
from django.dispatch import receiver
from django.http import HttpResponseRedirect
from django.urls import reverse, reverse_lazy
from django.views.decorators.cache import never_cache

from keys import two_factor
from keys.services import audit
from utils_app import limits

LOCKED_OUT = "locked_out"


def lockout_message() -> str:
    return (f"Sign-in is locked for {settings.STAFF_LOGIN_COOLOFF_MINUTES} minutes after "
            f"{settings.STAFF_LOGIN_FAILURE_LIMIT} failed attempts for this account from this address, "
            f"or {settings.STAFF_LOGIN_ADDRESS_FAILURE_LIMIT} for any accounts from this address. "
            "Wait, or ask an administrator to lift the lockout (manage.py unlock_staff).")


class Failures(NamedTuple):
    """Recent failures (within the cool-off) of one username from one address, and of the address."""

    pair: int
    address: int


class StaffLockoutHandler(AxesDatabaseHandler):
    """axes' database handler with the two limits of the staff sign-in (AXES_HANDLER).

    axes compares one count with one limit (AXES_FAILURE_LIMIT, the pair's). The count
    given to it is the pair's failures, or, once the address's failures over every
    username reached STAFF_LOGIN_ADDRESS_FAILURE_LIMIT, at least the pair's limit, so that
    the address is refused for every username. Each count is over the records of the
    cool-off, as axes keeps them (one row per username, address and user agent), in one query.
    """

    def get_failures(self, request, credentials: dict | None = None) -> int:
        username = get_client_username(request, credentials)
        recent = AccessAttempt.objects.filter(ip_address=request.axes_ip_address,
                                              attempt_time__gte=get_cool_off_threshold(request))
        totals = recent.aggregate(pair=Sum("failures_since_start", filter=Q(username=username)),
                                  address=Sum("failures_since_start"))
        failures = request.staff_failures = Failures(totals["pair"] or 0, totals["address"] or 0)
        if failures.address >= settings.STAFF_LOGIN_ADDRESS_FAILURE_LIMIT:
            return max(failures.pair, settings.AXES_FAILURE_LIMIT)
        return failures.pair


def client_address(request) -> str | None:
    """The address sign-ins are counted under (AXES_CLIENT_IP_CALLABLE): the public rate limit's.

    The database keeps it as an IP address, so anything else a forwarded header
    carried falls back to the peer's own address.
    """
    for address in (limits.client_address(request), request.META.get("REMOTE_ADDR", "")):
        try:
            return str(ipaddress.ip_address(address))
        except ValueError:
            continue
    return None


def is_locked_out(request, username: str) -> bool:
    return not AxesProxyHandler.is_allowed(request, {"username": username})


def record_failure(request, username: str) -> None:
    """Count a failed check that Django's authenticate() did not see (a code, a current password)."""
    user_login_failed.send(sender=__name__, credentials={"username": username}, request=request)


# Connected when this module is imported, which the URLconf does before the first
# staff request; lockouts happen only inside this module's views.
@receiver(user_locked_out, dispatch_uid="keys.staff_security.audit_lockout")
def audit_lockout(sender, request, username, ip_address, **kwargs):
    # axes repeats the signal for every attempt refused during a lockout; only the
    # failure that started it carries a count, so each lockout is written once.
    failures = getattr(request, "staff_failures", None)
    if getattr(request, "axes_failures_since_start", None) is None or failures is None:
        return
    if failures.address >= settings.STAFF_LOGIN_ADDRESS_FAILURE_LIMIT:
        scope = "address"
    elif _is_account(username):
        scope = "username and address"
    else:
        # A name no account has: its lockout protects nothing worth an entry, and a stranger
        # inventing names gets at most one entry per address and cool-off (the address's).
        return
    audit(actor=f"staff login from {ip_address}", action="staff_lockout", key=None, before=None,
          after={"username": username, "address": ip_address, "locked": scope, "failures": failures.pair,
                 "address_failures": failures.address, "cooloff_minutes": settings.STAFF_LOGIN_COOLOFF_MINUTES,
                 "path": request.path})


def _is_account(username: str | None) -> bool:
    model = get_user_model()
    return bool(username) and model.objects.filter(**{model.USERNAME_FIELD: username}).exists()


def lift_lockout(*, username: str = "", address: str = "", actor: str) -> int:
    """Forget the failures of one username or one address; returns how many records went."""
    address = _canonical_address(username, address)
    removed = reset(username=username or None, ip=address or None)
    if removed:
        audit(actor=actor, action="staff_unlock", key=None, before=None,
              after={"username": username, "address": address, "records_removed": removed})
    return removed


def failures_on_record(*, username: str = "", address: str = "") -> int:
    address = _canonical_address(username, address)
    if username:
        return AccessAttempt.objects.filter(username=username).count()
    return AccessAttempt.objects.filter(ip_address=address).count()


def _canonical_address(username: str, address: str) -> str:
    """The address as the database keeps it; ValueError for a malformed one or a bad pair of arguments."""
    if bool(username) == bool(address):
        raise ValueError("name exactly one of username and address")
    return str(ipaddress.ip_address(address)) if address else ""


class StaffLoginForm(AdminAuthenticationForm):
    """The admin login with an optional authentication code and a lockout that says what it is."""

    code = forms.CharField(
        label="Authentication code", required=False, max_length=32,
        help_text="From your authenticator app, or one of your recovery codes. "
                  "Leave empty if you have not set up two-factor sign-in.",
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "spellcheck": "false"}))

    def __init__(self, request=None, *args, **kwargs):
        super().__init__(request, *args, **kwargs)
        # AuthenticationForm sets max_length after the field is built, so nothing checks it; an
        # overlong name would reach the failure records' 255-character column and fail there.
        username = self.fields["username"]
        username.validators.append(MaxLengthValidator(username.max_length))

    @property
    def locked_out(self) -> bool:
        return self.has_error(NON_FIELD_ERRORS, LOCKED_OUT)

    def clean(self):
        try:
            super().clean()
        except ValidationError:
            if getattr(self.request, "axes_locked_out", False):
                raise ValidationError(lockout_message(), code=LOCKED_OUT) from None
            raise
        self.check_second_factor(self.get_user())
        return self.cleaned_data

    def check_second_factor(self, user) -> None:
        if user is None or not two_factor.is_enrolled(user):
            return
        code = self.cleaned_data.get("code")
        if not code:
            raise ValidationError("Two-factor sign-in is on for this account: enter the code from your "
                                  "authenticator app, or a recovery code.", code="code_required")
        device = two_factor.verify(user, code)
        if device is None:
            record_failure(self.request, user.get_username())
            if getattr(self.request, "axes_locked_out", False):
                raise ValidationError(lockout_message(), code=LOCKED_OUT)
            raise ValidationError("That authentication code is not right.", code="code_invalid")
        # django-otp keeps this device in the session when Django logs the user in.
        user.otp_device = device


class StaffLoginView(LoginView):
    authentication_form = StaffLoginForm
    template_name = "admin/staff/login.html"
    # Where an unsafe or missing "next" leads. The stubs want a str; Django resolves a lazy URL when it is used.
    next_page = reverse_lazy("admin:index")  # type: ignore[assignment]

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.locked_out:
            response.status_code = 429
        return response


@never_cache
@login_not_required
def login(request):
    """The admin site's login page, with our form and template (same context as AdminSite.login)."""
    if request.method == "GET" and admin.site.has_permission(request):
        return HttpResponseRedirect(reverse("admin:index"))
    context = {**admin.site.each_context(request), "title": "Log in", "subtitle": None,
               "app_path": request.get_full_path(), "username": request.user.get_username()}
    if REDIRECT_FIELD_NAME not in request.GET and REDIRECT_FIELD_NAME not in request.POST:
        context[REDIRECT_FIELD_NAME] = reverse("admin:index")
    request.current_app = admin.site.name
    return StaffLoginView.as_view(extra_context=context)(request)


class StaffPasswordChangeForm(AdminPasswordChangeForm):
    """Guessing the current password here counts towards the same lockout as the login page."""

    def __init__(self, user, *args, request=None, **kwargs):
        super().__init__(user, *args, **kwargs)
        self.request = request

    def clean_old_password(self):
        username = self.user.get_username()
        if is_locked_out(self.request, username):
            raise ValidationError(lockout_message(), code=LOCKED_OUT)
        try:
            return super().clean_old_password()
        except ValidationError:
            record_failure(self.request, username)
            if getattr(self.request, "axes_locked_out", False):
                raise ValidationError(lockout_message(), code=LOCKED_OUT) from None
            raise


class StaffPasswordChangeView(PasswordChangeView):
    form_class = StaffPasswordChangeForm

    def get_form_kwargs(self):
        return {**super().get_form_kwargs(), "request": self.request}

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.has_error("old_password", LOCKED_OUT):
            response.status_code = 429
        return response


def password_change(request):
    """The admin site's password change (same context as AdminSite.password_change), with our form."""
    request.current_app = admin.site.name
    return StaffPasswordChangeView.as_view(
        success_url=reverse("admin:password_change_done"),
        extra_context=admin.site.each_context(request))(request)
