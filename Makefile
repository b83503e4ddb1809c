# Two commands on a fresh machine:  make run  (set up and serve)  and  make test  (the whole suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test setup browser migrate seed demo-key serve ci bench clean

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

setup: $(STAMP)

migrate: setup
	$(PY) manage.py migrate --noinput

seed: migrate
	$(PY) manage.py seed_models

demo-key: seed
	@echo "Demo key (tier free, 1000 credits); it is shown only now:"
	@$(PY) manage.py issue_key --tier free --credits 1000 --name "demo (make run)" | tail -n 1

serve: setup
	$(VENV)/bin/gunicorn -c python:gateway.gunicorn_conf gateway.wsgi

run: demo-key serve

# The layers contract (.importlinter) first; --no-cache keeps its cache directory out of the tree
# (building the import graph takes under a second).
test: setup browser
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest $(PYTEST_ARGS)

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
	rm -rf $(VENV) .pytest_cache
