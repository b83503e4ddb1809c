"""Starting the service: a bad setting stops it with one line, and a provider it cannot call is named at once."""
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.db import OperationalError

# Imported once, here: loading the application sets Django up, which would replace caplog's handler.
from gateway.wsgi import warn_unconfigured_providers
from models_catalog import catalog
from models_catalog.models import AiModel, Deployment, Provider

ROOT = Path(__file__).resolve().parents[2]
BAD = {"MAX_REQUEST_BYTES": "abc"}
LINE = "MAX_REQUEST_BYTES must be an integer, got 'abc'"
# The shipped catalog's providers' secrets: OpenAI's, Anthropic's and Gemini's.
UPSTREAM_SECRETS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")


def started(command: list[str], tmp_path: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GATEWAY_DATA_DIR": str(tmp_path), **env})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("command", [["check"], ["migrate", "--noinput"], ["issue_key", "--tier", "free"]])
def test_a_bad_setting_stops_a_management_command_with_one_line_naming_it(tmp_path, command):
    done = started([sys.executable, "manage.py", *command], tmp_path, **BAD)
    assert done.returncode == 1
    assert done.stderr == LINE + "\n"
    assert done.stdout == ""


@pytest.mark.parametrize("workers", [{}, {"REDIS_URL": "redis://127.0.0.1:6379/0", "WEB_CONCURRENCY": "2"}])
def test_a_bad_setting_stops_gunicorn_with_that_line_alone_before_it_starts(tmp_path, workers):
    done = started([str(Path(sys.executable).parent / "gunicorn"), "-c", "python:gateway.gunicorn_conf",
                    "gateway.wsgi"], tmp_path, BIND=f"127.0.0.1:{free_port()}", **BAD, **workers)
    assert done.returncode == 1
    assert (done.stdout, done.stderr) == ("", LINE + "\n")  # no worker was forked to fail on its own


def test_gunicorn_without_the_projects_config_still_says_it_in_one_line(tmp_path):
    # `gunicorn gateway.wsgi`: the worker's application fails to load, which stops the server.
    done = started([str(Path(sys.executable).parent / "gunicorn"), "-b", f"127.0.0.1:{free_port()}",
                    "gateway.wsgi"], tmp_path, **BAD)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert LINE in output.splitlines()
    assert "Traceback" not in output and "ImproperlyConfigured" not in output


def warnings_at_load(caplog) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gateway.catalog"):
        warn_unconfigured_providers()
    return [record.getMessage() for record in caplog.records if record.name == "gateway.catalog"]


@pytest.mark.django_db
def test_loading_the_application_warns_once_for_each_provider_it_cannot_call(seeded, monkeypatch, caplog):
    for variable in UPSTREAM_SECRETS:
        monkeypatch.delenv(variable, raising=False)
    # A provider without a secret that no enabled model uses breaks nothing: no warning.
    Provider.objects.create(name="spare", base_url="https://spare.example/v1", api_key_env="GATEWAY_UPSTREAM_SPARE")
    assert sorted(warnings_at_load(caplog)) == [
        "provider anthropic is not configured: ANTHROPIC_API_KEY is not set, so its deployments of 2 model(s) cannot "
        "be called (claude-haiku-4-5, claude-sonnet-4-5); a model with no other deployment answers 502 "
        "upstream_unavailable",
        "provider gemini is not configured: GEMINI_API_KEY is not set, so its deployments of 3 model(s) cannot be "
        "called (gemini-2.5-flash, gemini-2.5-pro, gemini-embedding-001); a model with no other deployment answers "
        "502 upstream_unavailable",
        "provider openai is not configured: OPENAI_API_KEY is not set, so its deployments of 6 model(s) cannot be "
        "called (gpt-4.1-mini, gpt-4o-mini-tts, gpt-5, gpt-5-mini, gpt-image-1, text-embedding-3-small); a model "
        "with no other deployment answers 502 upstream_unavailable"]
    for variable in UPSTREAM_SECRETS:
        monkeypatch.setenv(variable, "sk-upstream")
    assert warnings_at_load(caplog) == []
    assert Provider.objects.count() == 5


@pytest.mark.django_db
def test_a_provider_with_several_secrets_is_named_with_the_ones_it_lacks(seeded, monkeypatch, caplog):
    for variable in UPSTREAM_SECRETS:
        monkeypatch.setenv(variable, "sk-upstream")
    monkeypatch.setenv("GATEWAY_UPSTREAM_A", "sk-a")
    monkeypatch.delenv("GATEWAY_UPSTREAM_B", raising=False)
    pooled = Provider.objects.create(name="pooled", base_url="https://pooled.example/v1",
                                     api_key_envs=["GATEWAY_UPSTREAM_A", "GATEWAY_UPSTREAM_B"])
    model = AiModel.objects.create(model_id="pooled-chat", type="chat", owned_by="x", cost=1, tiers=["free"])
    for variable in pooled.secret_envs():
        Deployment.objects.create(model=model, provider=pooled, secret_env=variable)
    catalog.invalidate()
    assert warnings_at_load(caplog) == [
        "provider pooled is not configured: GATEWAY_UPSTREAM_B is not set, so its deployments of 1 model(s) cannot "
        "be called (pooled-chat); a model with no other deployment answers 502 upstream_unavailable"]


def test_a_database_not_yet_reachable_does_not_stop_the_worker(seeded, caplog, monkeypatch):
    def unreachable():
        raise OperationalError("connection refused")

    monkeypatch.setattr("models_catalog.catalog.snapshot", unreachable)
    [warning] = warnings_at_load(caplog)  # the cause in words, as every database warning says it
    assert warning.startswith("could not check the providers' secrets at start: connection refused")


@pytest.mark.served
def test_a_gunicorn_worker_warns_once_it_has_started_and_a_command_does_not(tmp_path):
    env = {"DATABASE_URL": "", "REDIS_URL": "", "BIND": f"127.0.0.1:{free_port()}",
           "OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "GEMINI_API_KEY": ""}
    for command in (["migrate", "-v0"], ["seed_models"]):
        assert started([sys.executable, "manage.py", *command], tmp_path, **env).returncode == 0
    command = started([sys.executable, "manage.py", "check"], tmp_path, **env)
    assert command.returncode == 0 and "not configured" not in command.stderr
    log_path = tmp_path / "served.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen([str(Path(sys.executable).parent / "gunicorn"), "-c",
                                   "python:gateway.gunicorn_conf", "gateway.wsgi"], cwd=ROOT, stdout=log,
                                  stderr=subprocess.STDOUT, env={**os.environ, "GATEWAY_DATA_DIR": str(tmp_path), **env})
    try:
        deadline = time.monotonic() + 60
        while "Booting worker" not in log_path.read_text() or "GET health" not in log_path.read_text():
            assert time.monotonic() < deadline, log_path.read_text()
            try:  # the worker answers once it has run post_worker_init
                requests.get(f"http://{env['BIND']}/health", timeout=5)
            except requests.RequestException:
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=20)
    warnings = [line for line in log_path.read_text().splitlines() if "is not configured" in line]
    # One warning for each provider of the shipped catalog, whose secrets are all unset here.
    assert len(warnings) == 3
    for provider, variable in (("anthropic", "ANTHROPIC_API_KEY"), ("gemini", "GEMINI_API_KEY"),
                               ("openai", "OPENAI_API_KEY")):
        assert sum(f"provider {provider} is not configured: {variable} is not set" in line for line in warnings) == 1


# Runs manage.py with its arguments, then writes the names of every module it imported to the file named first.
LIST_MODULES = ("import atexit, runpy, sys; out = sys.argv.pop(1); "
                "atexit.register(lambda: open(out, 'w').write('\\n'.join(sorted(sys.modules)))); "
                "sys.argv[0] = 'manage.py'; runpy.run_path('manage.py', run_name='__main__')")


def imported_by(command: list[str], tmp_path: Path) -> set[str]:
    """The modules a manage.py command imports (on the embedded default: SQLite, no Redis)."""
    listed = tmp_path / "modules.txt"
    done = started([sys.executable, "-c", LIST_MODULES, str(listed), *command], tmp_path, DATABASE_URL="",
                   REDIS_URL="")
    assert done.returncode == 0, done.stderr[-2000:]
    return set(listed.read_text().split())


@pytest.mark.slow  # a manage.py start-up for each command
def test_the_projects_commands_skip_the_urlconfs_checks_and_redis_without_redis(tmp_path):
    from django.core.management import get_commands, load_command_class

    ours = {name: app for name, app in get_commands().items() if app.split(".")[0] in
            ("gateway", "keys", "models_catalog", "community", "utils_app")}
    assert {"seed_models", "demo_key", "probe_deployments", "issue_key"} <= set(ours)
    for name, app in ours.items():
        assert load_command_class(app, name).requires_system_checks == [], name
    assert started([sys.executable, "manage.py", "migrate", "-v0"], tmp_path, DATABASE_URL="").returncode == 0
    # What `make run` runs after migrate: neither imports the URLconf (the checks) nor redis-py (no Redis here).
    for command in (["seed_models"], ["demo_key"]):
        modules = imported_by(command, tmp_path)
        assert "keys.models" in modules, command  # the list is read right
        assert "gateway.urls" not in modules and "redis" not in modules, command
    assert "gateway.urls" in imported_by(["check"], tmp_path)  # the checks still run on demand
