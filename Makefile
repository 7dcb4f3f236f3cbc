# The two commands a new machine needs: `make run` (the system on the built-in emulators)
# and `make test` (lint, types, and the default test tiers). Both build the virtualenv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# The default tiers in parallel (pytest-xdist): every worker starts its own emulators on free
# ports; tests that must not overlap share an xdist_group, which loadgroup keeps on one worker.
# PARALLEL="-n 0" runs serially. The infra tier runs in processes of its own: its Hypothesis
# tests fail when anything else in the process changes the global `random` state mid-draw,
# which happened once when they shared an xdist worker with integration tests (google-api-core
# jitters its background retries with `random`).
PARALLEL ?= -n 2 --dist loadgroup

# The image tier (docs/image.md): the Dockerfile built on a stand-in base from Debian packages and
# run with podman, the whole local system on its containers. Not part of `make test`; it installs
# its tools with apt when they are missing (as root, or through sudo).
IMAGE_TOOLS := podman buildah mmdebstrap runc
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: venv run emulators test test-google lint typecheck unit integration infra image-test browser-test bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: venv
	$(BIN)/python -m services.local $(ARGS)

emulators: venv
	$(BIN)/python -m emulators $(ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

# Every tier runs even when an earlier one fails, and each one's verdict is printed at the end
# (a lint error no longer hides whether the tests pass, nor a failed integration tier that the
# infra tier never ran); the status is non-zero when any failed, so .ci/run still stops here.
ifeq ($(strip $(PYTEST_ARGS)),)
TEST_TIERS = tier unit $(BIN)/pytest $(PARALLEL) tests/unit; \
	tier integration $(BIN)/pytest $(PARALLEL) tests/integration; \
	tier infra $(BIN)/pytest $(PARALLEL) tests/infra;
else
TEST_TIERS = tier tests $(BIN)/pytest $(PARALLEL) $(PYTEST_ARGS);
endif

test: venv
	@status=0; verdicts=""; \
	tier() { \
	  name=$$1; shift; echo "== make test: $$name"; \
	  if "$$@"; then verdict=passed; else verdict="FAILED (exit $$?)"; status=1; fi; \
	  verdicts="$$verdicts$$(printf '\n  %-12s %s' "$$name" "$$verdict")"; \
	}; \
	tier lint $(MAKE) --no-print-directory lint; \
	tier typecheck $(MAKE) --no-print-directory typecheck; \
	$(TEST_TIERS) \
	printf '\nmake test, each tier:%s\n' "$$verdicts"; \
	exit $$status

# The integration tier again, on Google's Firestore and Pub/Sub emulators (gcloud, Java 11+):
# tests that need what only the built-in ones have, or production's strictness that Google's
# lack, carry a marker and are skipped there with its reason (tests/fixtures/emulator_set.py).
GOOGLE_TIERS := $(addprefix tests/integration/,api cli cloudrun/test_services_edge.py console firestore jobs pubsub scan worker local/test_topology.py)
test-google: venv
	JOBS_TEST_EMULATORS=google $(BIN)/pytest $(PARALLEL) $(GOOGLE_TIERS) $(PYTEST_ARGS)

unit: venv
	$(BIN)/pytest tests/unit $(PARALLEL) $(PYTEST_ARGS)

integration: venv
	$(BIN)/pytest tests/integration $(PARALLEL) $(PYTEST_ARGS)

infra: venv
	$(BIN)/pytest tests/infra $(PARALLEL) $(PYTEST_ARGS)

image-test: venv
	@missing=""; for tool in $(IMAGE_TOOLS); do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $(IMAGE_TOOLS); \
	fi
	$(BIN)/pytest -n 0 --timeout 3600 tests/image $(PYTEST_ARGS)

# The browser tier (tests/browser): the console of `make run`'s stack in headless Chromium. Not
# part of `make test`; it installs Debian's chromium with apt when missing (as image-test
# installs podman) and Playwright's Python driver from PyPI (the `browser` extra), which it
# points at /usr/bin/chromium: `playwright install` is never run. Screenshots land in
# .local/browser-artifacts.
browser-test: venv
	@command -v chromium >/dev/null || { echo "installing chromium"; $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium; }
	$(BIN)/python -m pip install --quiet -e '.[dev,browser]'
	$(BIN)/pytest -n 0 -p no:cacheprovider tests/browser $(PYTEST_ARGS)

bench: venv
	$(BIN)/python -m tests.benchmarks $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
