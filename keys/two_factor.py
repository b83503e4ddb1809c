"""Two-factor sign-in for staff: an authenticator app (TOTP) plus single-use recovery codes.

django-otp keeps the devices and checks the codes; this module holds our rules around it:
which code goes to which device, who must enrol (superusers, when STAFF_REQUIRE_2FA is on),
the enrolment page with its QR code, and the middleware that turns those rules into
redirects on the staff UI. docs/staff-security.md explains the decisions.
"""
from base64 import b32encode

import qrcode
import qrcode.image.svg
from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.auth import logout
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.safestring import mark_safe
from django_otp import login as otp_login
from django_otp.middleware import OTPMiddleware
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from keys.services import audit
from utils_app.middleware import is_api_path

RECOVERY_CODE_COUNT = 10
TOTP_DIGITS = 6
AUTHENTICATOR = "authenticator app"
RECOVERY_CODES = "recovery codes"
# Staff pages open to a session that has not passed the second factor: without them
# nobody could sign in again, sign out or load the admin's scripts.
SIGN_IN_VIEWS = {"staff:login", "admin:logout", "admin:jsi18n"}
STAFF_NAMESPACES = {"admin", "staff"}


def is_enrolled(user) -> bool:
    return TOTPDevice.objects.filter(user=user, confirmed=True).exists()


def must_enrol(user) -> bool:
    return settings.STAFF_REQUIRE_2FA and user.is_superuser


def normalise(code: str) -> str:
    """Codes are read off a phone or a sheet of paper: spaces and capitals are typing noise."""
    return "".join(code.split()).lower()


def verify(user, code: str):
    """The device that accepts ``code``, or None.

    Six digits go to the authenticator, anything else to the recovery codes, so a
    wrong guess never counts against the other device's throttle. The row lock
    makes two requests with the same code (a replayed TOTP step, a recovery code
    used twice) take turns, so only one of them gets in.
    """
    code = normalise(code)
    model = TOTPDevice if len(code) == TOTP_DIGITS and code.isdigit() else StaticDevice
    with transaction.atomic():
        device = model.objects.select_for_update().filter(user=user, confirmed=True).first()
        return device if device is not None and check(device, code) else None


def check(device, code: str) -> bool:
    """Whether the device takes the code; ValidationError while django-otp makes it wait after wrong ones."""
    allowed, _ = device.verify_is_allowed()
    if not allowed:
        raise ValidationError("Too many wrong codes in a row: wait a few seconds, then try again.",
                              code="code_throttled")
    return device.verify_token(code)


def new_recovery_codes(user) -> list[str]:
    """Replace the user's recovery codes; the plain codes exist for this one response."""
    codes = [StaticToken.random_token() for _ in range(RECOVERY_CODE_COUNT)]
    with transaction.atomic():
        StaticDevice.objects.filter(user=user).delete()
        device = StaticDevice.objects.create(user=user, name=RECOVERY_CODES, confirmed=True)
        StaticToken.objects.bulk_create(StaticToken(device=device, token=code) for code in codes)
    return codes


def pending_device(user) -> TOTPDevice:
    """The authenticator being enrolled: kept between page loads, so a scanned QR code stays valid."""
    device = TOTPDevice.objects.filter(user=user, confirmed=False).order_by("id").first()
    return device or TOTPDevice.objects.create(user=user, name=AUTHENTICATOR, confirmed=False, digits=TOTP_DIGITS)


def qr_svg(device: TOTPDevice) -> str:
    """The otpauth:// address as an inline SVG, drawn here: the secret never leaves the server."""
    image = qrcode.make(device.config_url, image_factory=qrcode.image.svg.SvgPathImage, box_size=16)
    return mark_safe(image.to_string(encoding="unicode"))  # our own drawing: paths, no text from the user


def manual_secret(device: TOTPDevice) -> str:
    """The secret in the base32 groups authenticator apps accept when typed in."""
    secret = b32encode(device.bin_key).decode()
    return " ".join(secret[i:i + 4] for i in range(0, len(secret), 4))


class ConfirmCodeForm(forms.Form):
    """The first code from the app being enrolled: proof that it holds the secret."""

    code = forms.CharField(label="Code from the app", max_length=12,
                           widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "numeric",
                                                         "autofocus": True}))

    def __init__(self, device, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.device = device

    def clean_code(self):
        if not check(self.device, normalise(self.cleaned_data["code"])):
            raise ValidationError("That code is not right. Check the phone's clock and type the newest code.",
                                  code="code_invalid")
        return self.cleaned_data["code"]


def _actor(request) -> str:
    return f"staff {request.user.get_username()}"


def two_factor_page(request):
    """Enrol an authenticator, or (once enrolled) see the state and replace the recovery codes."""
    user = request.user
    context = {**admin.site.each_context(request), "title": "Two-factor sign-in",
               "required": must_enrol(user)}
    request.current_app = admin.site.name
    if is_enrolled(user):
        return _enrolled(request, context)
    device = pending_device(user)
    form = ConfirmCodeForm(device, request.POST or None)
    if form.is_valid():
        return _confirm(request, device, context)
    context.update(form=form, qr_svg=qr_svg(device), secret=manual_secret(device))
    return TemplateResponse(request, "admin/staff/two_factor_enrol.html", context)


def _confirm(request, device, context):
    device.confirmed = True
    device.save(update_fields=["confirmed"])
    codes = new_recovery_codes(request.user)
    # The code just typed proves this session holds the second factor.
    otp_login(request, device)
    audit(actor=_actor(request), action="staff_2fa_enrolled", key=None, before=None,
          after={"username": request.user.get_username()})
    context.update(codes=codes, just_enrolled=True)
    return TemplateResponse(request, "admin/staff/recovery_codes.html", context)


def _enrolled(request, context):
    if request.method == "POST":
        codes = new_recovery_codes(request.user)
        audit(actor=_actor(request), action="staff_recovery_codes", key=None, before=None,
              after={"username": request.user.get_username(), "codes": len(codes)})
        context.update(codes=codes, just_enrolled=False)
        return TemplateResponse(request, "admin/staff/recovery_codes.html", context)
    left = StaticToken.objects.filter(device__user=request.user, device__confirmed=True).count()
    context.update(recovery_codes_left=left, recovery_codes_total=RECOVERY_CODE_COUNT)
    return TemplateResponse(request, "admin/staff/two_factor_status.html", context)


class TwoFactorMiddleware(OTPMiddleware):
    """django-otp's ``request.user.is_verified()``, plus our rules on the staff pages.

    On the API paths it does nothing at all (no session, no user there), like the
    wrappers in utils_app.middleware. On a staff page, a signed-in member whose
    session has not passed the second factor is sent to enrol (a superuser, when
    STAFF_REQUIRE_2FA is on) or, when they already have an authenticator, signed out
    to sign in again with a code: their session predates the enrolment.
    """

    def __call__(self, request):
        if is_api_path(request):
            return self.get_response(request)
        return super().__call__(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        match = request.resolver_match
        if match is None or match.namespace not in STAFF_NAMESPACES or match.view_name in SIGN_IN_VIEWS:
            return None
        user = request.user
        if not (user.is_authenticated and user.is_staff) or user.is_verified():
            return None
        if is_enrolled(user):
            logout(request)
            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        if must_enrol(user) and match.view_name != "staff:two_factor":
            return HttpResponseRedirect(reverse("staff:two_factor"))
        return None
