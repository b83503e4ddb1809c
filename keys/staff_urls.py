"""Staff pages that replace or extend the admin site's: listed before admin.site.urls in gateway/urls.py.

The login and password-change pages take the admin's own addresses, so every link and
redirect the admin makes (reverse("admin:login"), the "Change password" link) lands here.
"""
from django.contrib import admin
from django.urls import path

from keys import staff_security, two_factor

app_name = "staff"

urlpatterns = [
    path("login/", staff_security.login, name="login"),
    path("password_change/", admin.site.admin_view(staff_security.password_change), name="password_change"),
    path("two-factor/", admin.site.admin_view(two_factor.two_factor_page), name="two_factor"),
]
