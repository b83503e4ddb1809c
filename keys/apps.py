from axes.apps import AppConfig as AxesConfig
from django.apps import AppConfig
from django_otp.plugins.otp_static.apps import DefaultConfig as StaticDevicesConfig
from django_otp.plugins.otp_totp.apps import DefaultConfig as TotpDevicesConfig


class KeysConfig(AppConfig):
    default = True  # the app's own config, among the others this module defines
    name = "keys"
    verbose_name = "API keys and credits"


# The staff sign-in apps (keys/staff_security.py, keys/two_factor.py) as they are, under headings a
# staff member can read on the admin index instead of their labels ("AXES", "OTP_TOTP").

class StaffLockoutsConfig(AxesConfig):
    verbose_name = "Staff sign-in lockouts"


class StaffAuthenticatorAppsConfig(TotpDevicesConfig):
    verbose_name = "Two-factor: authenticator apps"


class StaffRecoveryCodesConfig(StaticDevicesConfig):
    verbose_name = "Two-factor: recovery codes"
