# Two commands on a fresh machine:  make run  (set up and serve)  and  make test  (the whole suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast setup browser address-free migrate seed demo-key serve ci bench clean

# Where `make run` serves; gunicorn reads it too (gateway/gunicorn_conf.py).
BIND ?= 127.0.0.1:8000
export BIND

# pip is quiet (its output shows only on an error), so each step says first what it is about to do: on a
# fresh machine the install is most of the first run's wait (docs/operations.md, "Start-up times").
$(STAMP): requirements.txt
	@test -x $(PY) || { echo "creating the virtualenv $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo "updating pip in $(VENV)"
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	@echo "installing requirements.txt into $(VENV) (the first time: about a minute or two; later runs skip this)"
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@echo "requirements installed"
	touch $(STAMP)

setup: $(STAMP)

migrate: setup
	@echo "bringing the database up to date (manage.py migrate)"
	$(PY) manage.py migrate --noinput

seed: migrate
	@echo "loading the model catalog (manage.py seed_models)"
	$(PY) manage.py seed_models

# The same demo key on every run while it exists and is active; its secret is kept in the data dir.
demo-key: seed
	@$(PY) manage.py demo_key

serve: setup
	$(VENV)/bin/gunicorn -c python:gateway.gunicorn_conf gateway.wsgi

# A server already listening at BIND (an earlier `make run`): stop before anything is set up or
# issued for a server that could not start. create_server binds with SO_REUSEADDR as gunicorn does,
# so connections an earlier run closed do not count; a BIND that is not host:port (a unix socket)
# is left to gunicorn.
address-free: setup
	@$(PY) -c 'import socket, sys; host, _, port = sys.argv[1].rpartition(":"); host = host.strip("[]"); \
	  port.isdigit() and socket.create_server((host, int(port)), \
	                                          family=socket.AF_INET6 if ":" in host else socket.AF_INET).close()' \
	  "$(BIND)" 2>/dev/null \
	  || { echo "$(BIND) is in use (is the gateway already running?): stop that server or set BIND=host:port."; exit 1; }

run: address-free demo-key serve

# The layers contract (.importlinter) first; --no-cache keeps its cache directory out of the tree
# (building the import graph takes under a second). Then the types (mypy.ini: every app, --strict on
# the upstream adapters): about five seconds the first time, under a second from its cache (.mypy_cache/).
test: setup browser
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy --config-file mypy.ini
	$(PY) -m pytest $(PYTEST_ARGS)

# The quick loop while working: the same checks, then the suite without the tests marked browser,
# faults, served (gunicorn in a subprocess) or slow (pytest.ini); `make test` runs every one of them.
test-fast: setup
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy --config-file mypy.ini
	$(PY) -m pytest -m "not browser and not faults and not served and not slow" $(PYTEST_ARGS)

# The browser tests drive Debian's headless Chromium: installed here when missing and
# we are root; otherwise they are skipped with the reason (CI installs it in .ci/run).
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) \
	      || echo "could not install chromium: the browser tests will be skipped"; \
	  else echo "chromium/chromedriver missing (not root): the browser tests will be skipped"; fi; \
	fi

ci:
	bash .ci/run

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
