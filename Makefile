# The README's commands. Every target sets up first; setup is idempotent and quick the second time.
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup run test test-quick bench lint doctor clean screenshot sudoers

setup:
	@bash scripts/setup.sh

# a local collector, then the window pointed at it (headless when there is no display)
run: setup
	$(PY) launcher.py

# a full run has to stay under 25 minutes on 2 CPUs: the tests without BPF run first on both CPUs
# (pytest-xdist, 509 -> 343 s on 2026-11-29), then the BPF tests one at a time (their workloads and
# ground truth want the machine to themselves); each part lists its slowest tests. Exit status 5 is
# pytest's "no test selected" (a PYTEST_ARGS that picks tests of one kind only)
test: setup
	$(PY) -m pytest -m "not bpf" -n 2 --durations=15 $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest -m bpf --durations=30 $(PYTEST_ARGS) || [ $$? -eq 5 ]

# the quick tests alone (no BPF, nothing marked slow): about a minute, no root needed (as a user, setup
# only checks what is in place: tests/host/test_setup_script.py)
test-quick: setup
	$(PY) -m pytest -m "not bpf and not slow" $(PYTEST_ARGS)

# BENCH_QUICK=1: fewer repetitions and shorter runs; BENCH_ARGS: e.g. --only ingest,app_memory
BENCH_QUICK ?=
BENCH_ARGS ?=
bench: setup
	$(PY) bench/run.py $(if $(BENCH_QUICK),--quick) $(BENCH_ARGS)

# the running window under Xvfb, with metrics and a local collector -> docs/screenshot.png, docs/flamegraph.png
screenshot: setup
	xvfb-run -a -s "-screen 0 1400x900x24" $(PY) scripts/screenshot.py
	xvfb-run -a -s "-screen 0 1600x1000x24" $(PY) scripts/screenshot.py --metrics offcpu --show offcpu \
		--workload blocking --only-workload --search futex --seconds 15 --size 1600x1000 --out docs/flamegraph.png

doctor: setup
	$(PY) main_app.py --doctor

# as root: a sudoers rule letting user FOR (default: whoever ran sudo) run the privilege helper as root,
# and nothing else (docs/privileges.md); `host/privhelper.py sudoers USER` only prints it
FOR ?= $(SUDO_USER)
sudoers:
	/usr/bin/python3 -I host/privhelper.py sudoers $(FOR) --install

lint: setup
	$(PY) -m ruff check .

clean:
	rm -rf .venv .pytest_cache
