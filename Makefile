# The README's commands. Every target sets up first; setup is idempotent and quick the second time.
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup run test bench lint doctor clean

setup:
	@bash scripts/setup.sh

run: setup
	$(PY) main_app.py

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# BENCH_QUICK=1: fewer repetitions and shorter runs; BENCH_ARGS: e.g. --only startup,memory
BENCH_QUICK ?=
BENCH_ARGS ?=
bench: setup
	$(PY) bench/run.py $(if $(BENCH_QUICK),--quick) $(BENCH_ARGS)

doctor: setup
	$(PY) main_app.py --doctor

lint: setup
	$(PY) -m ruff check .

clean:
	rm -rf .venv .pytest_cache
