"""Hostile input from staff: every add and change form of the project's own admin pages, every bulk action that
asks for input, the deployment page's buttons and every write endpoint of the admin JSON API, each started from a
valid submission and spoiled one field at a time by a seeded generator. None may earn a 5xx or a stack trace; a
form comes back with its error, the JSON API answers a 4xx in the contract's shape, and no credit moves without
its ledger row.

The pages and endpoints are found by walking the admin registry and the URL resolver, so a new form is swept
without editing this file (a new JSON write endpoint needs its valid body in VALID_BODIES, which the first test
insists on)."""
import json
import random
import re
from html.parser import HTMLParser

import pytest
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.forms.models import _get_foreign_key
from django.test import RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from community.models import Guild
from gateway import deployment_pages
from keys import staff_urls
from keys.ledger import mismatches
from keys.views import AdminView
from models_catalog.models import Deployment
from tests.conftest import bearer
from tests.gateway.conftest import OPENAI, in_error_shape
from utils_app.models import Fact

pytestmark = pytest.mark.django_db

SEED = 20261129
PROJECT_APPS = {"keys", "models_catalog", "community", "utils_app", "gateway"}

# What a browser can post in a form field (a lone surrogate cannot be encoded in a form body, so it is left to the
# JSON API, whose escapes can carry one).
FORM_VALUES = ["", "a\x00b", "x" * 100_000, "   ", "-1", "0", str(2**70), str(-(2**70)), "1.5", "NaN", "Infinity",
               "-Infinity", "1e999", "abc", "no-such-choice", "999999", "[1, 2]", "null", "\"text\"", "{\"a\": 1}",
               "x\u202e\n"]
ALWAYS = FORM_VALUES[:3]  # tried on every form field; the rest are drawn
JSON_VALUES = [None, True, "", "   ", "x" * 100_000, "a\x00b", "\ud800", -1, 0, 2**70, -(2**70), 1.5, float("nan"),
               float("inf"), "NaN", "Infinity", "abc", "no-such-choice", 999999, [], {}, [None], {"a": 1}]
PER_FIELD = 8  # values drawn for each member of each JSON body, and each field of an action or button
FORM_PER_FIELD = 5  # and for each field of each add or change form (some 650 posts in all)
NOT_AN_OBJECT = ["", "null", "[]", "[{}]", "\"text\"", "5", "true", "{", "{\"key\": \"\\ud800\"}", "NaN"]


# ---------------------------------------------------------------- the admin site's forms

def project_admins():
    return [(model, model_admin) for model, model_admin in admin.site._registry.items()
            if model._meta.app_label in PROJECT_APPS]


def form_data(response) -> dict:
    """The form a page shows, as the browser would post it back: the main form and each inline formset."""
    context = response.context
    data: dict = {}
    main = context["adminform"].form if "adminform" in context else context["form"]
    forms = [main]
    for inline in context.get("inline_admin_formsets", []) or []:
        formset = inline.formset
        for bound in formset.management_form:
            data[bound.html_name] = "" if bound.value() is None else bound.value()
        forms.extend(formset.forms)
    for form in forms:
        for bound in form:
            value = bound.value()
            value = getattr(value, "pk", value)
            if isinstance(value, bool):
                if value:
                    data[bound.html_name] = "on"
                continue
            if isinstance(value, (list, tuple)):
                data[bound.html_name] = [str(item) for item in value]
            else:
                data[bound.html_name] = "" if value is None else str(value)
            if bound.field.show_hidden_initial:
                initial = form.get_initial_for_field(bound.field, bound.name)
                data[bound.html_initial_name] = "" if initial is None else str(initial)
    return data


# Names a rule keeps unique across rows, though no database index does (a model's aliases are names it answers to).
UNIQUE_BY_RULE = {"aliases"}


def unique_fields(model) -> set[str]:
    return {field.name for field in model._meta.fields if field.unique and not field.primary_key} | UNIQUE_BY_RULE


def some_rows(make_key, seeded) -> None:
    """A row of each model to start a valid submission from."""
    make_key(tier="premium", credits=50, max_credits=200, name="for ann")
    Guild.objects.create(name="Makers", invite_code="makers42", description="Builders.")
    Fact.objects.create(text="Water boils at 100 degrees Celsius at sea level.", topic=Fact._meta.get_field(
        "topic").choices[0][0])


def valid_submissions(client, user):
    """(label, url, data) of each add and change form, filled from an existing row; each read when it is reached,
    as the row is then (a provider's change may have replaced its deployments)."""
    for model, model_admin in project_admins():
        if not (model_admin.has_add_permission(_request(user))
                or model_admin.has_change_permission(_request(user))):
            continue  # a read-only record
        row = model._default_manager.order_by("pk").first()
        assert row is not None, f"no {model.__name__} row to start its forms from"
        opts = model._meta
        change = None
        if model_admin.has_change_permission(_request(user), row):
            url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[row.pk])
            change = current_form(client, url)
            yield f"change {opts.label}", url, change
        if model_admin.has_add_permission(_request(user)):
            url = reverse(f"admin:{opts.app_label}_{opts.model_name}_add")
            add = current_form(client, url)
            links = {"-id", *(f"-{_get_foreign_key(model, inline.model, inline.fk_name).name}"
                              for inline in model_admin.inlines)}
            for name in change or {}:  # the fields as the existing row has them, its inline rows included
                if name.endswith("-TOTAL_FORMS"):
                    add[name] = str(max(int(add.get(name, 0)), int(change[name])))
                elif (name in add or "-" in name) and not name.endswith((*links, "_FORMS")):
                    add[name] = change[name]
                elif change is None and hasattr(row, name) and "-" not in name and not add[name]:
                    add[name] = str(getattr(row, name))
            yield f"add {opts.label}", url, add


def current_form(client, url) -> dict:
    page = client.get(url)
    assert page.status_code == 200, (url, page.status_code)
    return form_data(page)


def restored(client, url, valid: dict) -> dict:
    """Put a row a spoiled submission changed back as ``valid`` had it, and its form as it is now."""
    now = current_form(client, url)
    response = client.post(url, {**now, **{name: value for name, value in valid.items() if "-" not in name}})
    assert response.status_code == 302, (url, "could not restore", (response.context or {}).get("errors"))
    return current_form(client, url)


def _request(user):
    request = RequestFactory().get("/")
    request.user = user
    return request


def accepted_form(response) -> bool:
    """A redirect (saved) or a page saying it was done, i.e. not a re-rendered form with errors."""
    if response.status_code == 302:
        return True
    context = response.context or {}
    return "secret" in context and "key" in context  # the page that shows a newly issued key


def form_errors(response) -> bool:
    context = response.context or {}
    if "adminform" in context and (context["adminform"].form.errors or context.get("errors")):
        return True
    if any(inline.formset.errors and any(inline.formset.errors) or inline.formset.non_form_errors()
           for inline in context.get("inline_admin_formsets", []) or []):
        return True
    form = context.get("form")
    return bool(form is not None and getattr(form, "errors", None))


def page_defect(response) -> str | None:
    body = response.content
    if response.status_code >= 500:
        return f"{response.status_code}: {body[:300]!r}"
    if b"Traceback" in body:
        return f"a traceback: {body[:300]!r}"
    if response.status_code == 302 or (response.status_code == 200 and (accepted_form(response)
                                                                         or form_errors(response))):
        return None
    return f"{response.status_code} neither saved nor an error shown: {body[:300]!r}"


def unique_suffixed(data: dict, model, n: int) -> dict:
    data = dict(data)
    for name in unique_fields(model) & set(data):
        if data[name]:
            data[name] = f"{data[name]}{n}"
    return data


LEFT_OUT = object()


def spoilers(data: dict, rng: random.Random):
    """(field, value) for each field spoiled with each drawn value, or left out (LEFT_OUT)."""
    for name in sorted(data):
        if name.endswith(("TOTAL_FORMS", "INITIAL_FORMS", "MIN_NUM_FORMS", "MAX_NUM_FORMS")):
            continue
        for value in [*ALWAYS, *rng.sample(FORM_VALUES[len(ALWAYS):], FORM_PER_FIELD - len(ALWAYS))]:
            yield name, value
        if data[name]:
            yield name, LEFT_OUT


def spoil(data: dict, name: str, value) -> dict:
    spoilt = dict(data)
    if value is LEFT_OUT:
        spoilt.pop(name, None)
    else:
        spoilt[name] = value
    return spoilt


def sweep_forms(client, user, rng) -> tuple[int, list[str]]:
    found: list[str] = []
    sent = 0
    for label, url, valid in valid_submissions(client, user):
        model = next(m for m, _ in project_admins() if label.endswith(m._meta.label))
        adding = label.startswith("add")
        response = client.post(url, unique_suffixed(valid, model, sent) if adding else valid)
        assert accepted_form(response), (label, "the valid submission was refused", response.status_code,
                                         (response.context or {}).get("errors"))
        if adding:  # the same unique values again: a duplicate
            sent += 1
            again = client.post(url, unique_suffixed(valid, model, sent - 1))
            if unique_fields(model) & set(valid):
                if (defect := page_defect(again)) or accepted_form(again):
                    found.append(f"{label} duplicate: {defect or 'accepted'}")
        for name, value in list(spoilers(valid, rng)):
            sent += 1
            data = spoil(valid, name, value)
            response = client.post(url, unique_suffixed(data, model, sent) if adding else data)
            if defect := page_defect(response):
                what = "left out" if value is LEFT_OUT else f"= {value[:20]!r}"
                found.append(f"{label} {name} {what}: {defect}")
            elif not adding and accepted_form(response):
                valid = restored(client, url, valid)
    return sent, found


# ---------------------------------------------------------------- bulk actions that ask for input

def action_forms(client, user) -> list[tuple[str, str, dict]]:
    """(label, changelist url, data) of each bulk action whose confirmation page shows a form, on one row."""
    found = []
    for model, model_admin in project_admins():
        row = model._default_manager.order_by("pk").first()
        if row is None:
            continue
        opts = model._meta
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        for name in model_admin.get_actions(_request(user)):
            if name == "delete_selected":
                continue
            base = {"action": name, ACTION_CHECKBOX_NAME: [str(row.pk)], "index": "0"}
            page = client.post(url, base)
            context = page.context or {}
            form = context.get("form") if page.status_code == 200 else None
            if form is None or not form.fields:
                continue
            data = {**base, "apply": "1", **{bound.html_name: "" if bound.value() is None else str(bound.value())
                                            for bound in form}}
            found.append((f"action {opts.label} {name}", url, data))
    return found


def sweep_actions(client, user, rng) -> tuple[int, list[str]]:
    found: list[str] = []
    sent = 0
    for label, url, valid in action_forms(client, user):
        fields = [name for name in valid if name not in {"action", ACTION_CHECKBOX_NAME, "index", "apply"}]
        for name in fields:
            for value in rng.sample(FORM_VALUES, PER_FIELD):
                sent += 1
                response = client.post(url, {**valid, name: value})
                if response.status_code >= 500 or b"Traceback" in response.content:
                    found.append(f"{label} {name} = {value[:20]!r}: {response.status_code} "
                                 f"{response.content[:300]!r}")
                elif response.status_code not in (200, 302):
                    found.append(f"{label} {name} = {value[:20]!r}: {response.status_code}")
    return sent, found


# ---------------------------------------------------------------- the admin's own extra pages (access matrix, find…)

class PageForm(HTMLParser):
    """The fields of a page's forms that post (not the log-out button's), as a browser would send them."""

    def __init__(self):
        super().__init__()
        self.fields: list[tuple[str, str]] = []
        self._posting = False

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if tag == "form":
            self._posting = (found.get("method") or "").lower() == "post" and "logout" not in (found.get("action")
                                                                                               or "")
        elif self._posting and tag in ("input", "textarea", "select") and found.get("name"):
            if found.get("type") in ("checkbox", "radio") and "checked" not in found:
                return
            if found.get("type") in ("submit", "button"):
                return
            self.fields.append((found["name"], found.get("value") or ""))


def extra_pages(user) -> list[tuple[str, str]]:
    """(label, url) of each page a project admin adds with get_urls, its object the first row where it takes one."""
    found = []
    for model, model_admin in project_admins():
        standard = {pattern.name for pattern in admin.ModelAdmin.get_urls(model_admin)}
        row = model._default_manager.order_by("pk").first()
        for pattern in model_admin.get_urls():
            if not isinstance(pattern, URLPattern) or pattern.name in standard:
                continue
            args = [row.pk] if "object_id" in pattern.pattern.converters else []
            if args and row is None:
                continue
            found.append((f"{model._meta.label} {pattern.name}", reverse(f"admin:{pattern.name}", args=args)))
        if model_admin.list_editable and model_admin.has_change_permission(_request(user)):
            opts = model._meta
            found.append((f"{opts.label} list", reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")))
    # The staff site's own sign-in, password and two-factor pages (keys/staff_urls.py), last: they are the
    # ones a failed attempt counts against.
    found += [(f"staff {pattern.name}", reverse(f"staff:{pattern.name}")) for pattern in staff_urls.urlpatterns]
    return found


def sweep_extra_pages(client, user, rng) -> tuple[int, list[str]]:
    found: list[str] = []
    sent = 0
    for label, url in extra_pages(user):
        page = client.get(url)
        parser = PageForm()
        if page.status_code == 200 and not page.streaming:
            parser.feed(page.content.decode())
        fields = [(name, value) for name, value in parser.fields if name != "csrfmiddlewaretoken"]
        # A list's rows are alike: its first row's fields, and the formset's own, stand for them all.
        names = sorted({name for name, _ in fields if not re.match(r"form-[1-9]", name)}) or ["secret"]
        for name in names:
            for value in [*ALWAYS, *rng.sample(FORM_VALUES[len(ALWAYS):], FORM_PER_FIELD - len(ALWAYS)), "\u00b2:free",
                          f"{2**70}:free"]:
                data: dict[str, list[str]] = {}
                for field, kept in fields:
                    data.setdefault(field, []).append(kept)
                data[name] = [value, *data.get(name, [])[1:]]
                if label.endswith(" list"):
                    data["_save"] = ["Save"]
                sent += 1
                response = client.post(url, data)
                if response.status_code >= 500 or response.status_code in (200, 400) and b"Traceback" in \
                        response.content or response.status_code not in (200, 302, 400, 403, 404, 405, 429):
                    found.append(f"{label} {name} = {value[:20]!r}: {response.status_code} {response.content[:300]!r}")
    return sent, found


# ---------------------------------------------------------------- the deployment page's buttons

def deployment_buttons() -> list[str]:
    return [pattern.name for pattern in deployment_pages.urlpatterns
            if isinstance(pattern, URLPattern) and "deployment_id" in pattern.pattern.converters]


def sweep_buttons(client, rng) -> tuple[int, list[str]]:
    found: list[str] = []
    sent = 0
    deployment = Deployment.objects.order_by("pk").first()
    for name in deployment_buttons():
        for pk in (deployment.pk, 999999, 2**62):
            url = reverse(name, args=[pk])
            for field in ("reason", "next"):
                for value in rng.sample(FORM_VALUES, PER_FIELD):
                    sent += 1
                    response = client.post(url, {field: value})
                    if response.status_code != 302 or b"Traceback" in response.content:
                        found.append(f"{name} #{pk} {field} = {value[:20]!r}: {response.status_code} "
                                     f"{response.content[:300]!r}")
    return sent, found


# ---------------------------------------------------------------- the admin JSON API

def admin_api_writes() -> list[tuple[str, str, dict]]:
    """(url name, route, converters) of every admin API view that takes a POST, from the URL resolver."""
    found = []

    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                view = getattr(pattern.callback, "view_class", None)
                if view is not None and issubclass(view, AdminView) and hasattr(view, "post"):
                    found.append((pattern.name, prefix + str(pattern.pattern), pattern.pattern.converters))
    walk(get_resolver().url_patterns)
    return found


def valid_bodies(secret: str, deployment_id: int) -> dict:
    """A valid body and the path arguments of each write endpoint, by URL name."""
    return {
        "admin-update-key": ({"key": secret, "update": {"tier": "premium", "credits": 40, "maxCredits": 300,
                                                        "rpm": 30, "owner": {"category": "beta"}}}, []),
        "admin-create-key": ({"config": {"name": "for bob", "tier": "free", "credits": 10, "maxCredits": 100,
                                         "owner": {"platform_id": "7"}}}, []),
        "admin-revoke-key": ({"key": secret}, []),
        "admin-disable-deployment": ({"reason": "provider maintenance"}, [deployment_id]),
        "admin-enable-deployment": ({}, [deployment_id]),
    }


def member_paths(value, path=()):
    if isinstance(value, dict):
        for name, member in value.items():
            yield (*path, name)
            yield from member_paths(member, (*path, name))


def with_member(body: dict, path: tuple, value) -> dict:
    body = json.loads(json.dumps(body))
    target = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return body


def api_defect(response) -> str | None:
    if response.status_code >= 500:
        return f"{response.status_code}: {response.content[:300]!r}"
    if b"Traceback" in response.content:
        return f"a traceback: {response.content[:300]!r}"
    if response.status_code >= 400:
        try:
            answer = json.loads(response.content)
        except ValueError:
            return f"{response.status_code} not JSON: {response.content[:300]!r}"
        if not in_error_shape(OPENAI, response.status_code, answer):
            return f"{response.status_code} in another shape: {response.content[:300]!r}"
    return None


def sweep_api(client, make_key, rng) -> tuple[int, list[str]]:
    found: list[str] = []
    sent = 0
    _, admin_secret = make_key(tier="special", credits=1000, is_admin=True)
    deployment = Deployment.objects.order_by("pk").first()

    def post(route, data):
        nonlocal sent
        sent += 1
        text = data if isinstance(data, str) else json.dumps(data)
        return client.post(route, text, content_type="application/json", **bearer(admin_secret))

    for name, _, converters in admin_api_writes():
        for kind in ("members", "bodies"):
            _, secret = make_key(tier="free", credits=20, max_credits=100)
            body, args = valid_bodies(secret, deployment.pk)[name]
            route = reverse(name, args=args)
            if kind == "bodies":
                for text in NOT_AN_OBJECT:
                    if defect := api_defect(response := post(route, text)):
                        found.append(f"{name} body {text!r}: {defect}")
                    elif response.status_code < 400 and text:
                        found.append(f"{name} body {text!r}: accepted ({response.status_code})")
                continue
            for path in member_paths(body):
                for value in rng.sample(JSON_VALUES, PER_FIELD):
                    if defect := api_defect(post(route, with_member(body, path, value))):
                        found.append(f"{name} {path} = {str(value)[:20]!r}: {defect}")
                if defect := api_defect(post(route, with_member(body, path[:-1] + (f"unknown_{path[-1]}",), 1)
                                             if len(path) > 1 else {**body, "unknown": 1})):
                    found.append(f"{name} unknown member beside {path}: {defect}")
        if "id" in converters:  # the path's id: unknown, too big, not a number
            for pk in ("999999", str(2**70), "-1", "abc", "\x00", "\u00b2"):
                if defect := api_defect(post(reverse(name, args=[pk]), "{}")):
                    found.append(f"{name} id {pk!r}: {defect}")
    return sent, found


# ---------------------------------------------------------------- the tests

def test_every_admin_api_write_endpoint_has_a_valid_body_to_start_from(db):
    names = {name for name, _, _ in admin_api_writes()}
    assert names >= {"admin-update-key", "admin-create-key", "admin-revoke-key", "admin-disable-deployment"}
    assert names <= set(valid_bodies("sk-x", 1)), "a new admin API write endpoint: give it a valid body above"


def test_the_walk_finds_the_forms_and_actions_to_sweep(staff_client, staff_user, make_key, seeded):
    some_rows(make_key, seeded)
    labels = {label for label, _, _ in valid_submissions(staff_client, staff_user)}
    assert {"add keys.ApiKey", "change keys.ApiKey", "add models_catalog.AiModel", "change models_catalog.Provider",
            "add community.Guild", "change utils_app.Fact"} <= labels
    actions = {label for label, _, _ in action_forms(staff_client, staff_user)}
    assert {"action keys.ApiKey add_credits", "action keys.ApiKey change_tier"} <= actions
    pages = {label for label, _ in extra_pages(staff_user)}
    assert {"models_catalog.AiModel models_catalog_aimodel_access", "keys.ApiKey keys_apikey_find",
            "community.Guild list", "staff password_change", "staff two_factor"} <= pages
    assert set(deployment_buttons()) == {"staff_deployment_disable", "staff_deployment_enable",
                                         "staff_deployment_probe"}


@pytest.mark.slow
def test_hostile_staff_input_earns_an_error_never_a_500_and_moves_no_credit_without_its_ledger_row(
        staff_client, staff_user, make_key, seeded):
    some_rows(make_key, seeded)
    staff_client.raise_request_exception = False  # a 500 is a finding to list, not the end of the sweep
    rng = random.Random(SEED)
    total = 0
    found: list[str] = []
    for sweep in (lambda: sweep_forms(staff_client, staff_user, rng), lambda: sweep_actions(staff_client, staff_user, rng),
                  lambda: sweep_extra_pages(staff_client, staff_user, rng),
                  lambda: sweep_buttons(staff_client, rng), lambda: sweep_api(staff_client, make_key, rng)):
        sent, defects = sweep()
        total += sent
        found += defects
    assert not found, f"{len(found)} of {total}:\n" + "\n".join(found[:60])
    assert mismatches() == []
