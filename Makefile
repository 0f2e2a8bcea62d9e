# Two entry points; both install what they need first and are safe to repeat.
#   make run   - set up, run matrix.yaml (the cells this machine can run), then regenerate the report
#   make test  - set up (plus test tools) and run the whole test suite but the `diagnose` proofs
#   make test-diagnose - the slowed-cell and emulated-cluster proofs of docs/diagnose.md (minutes each)
#   make test-fast - the same set-up, then only the unit and contract tests (no launcher, no training job): the
#                    inner loop: 1 min 52 s wall for 732 tests on a 2-core machine, in a fresh clone
#                    (measured 2026-11-25)
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: run test test-fast test-diagnose install install-test bench clean

install:
	@scripts/install.sh run

install-test:
	@scripts/install.sh test

run: install
	@status=0; $(PY) -m bench run matrix.yaml || status=$$?; \
	$(PY) -m bench report; \
	echo "store: results/bench.db   report: reports/index.html (also reports/summary.md)"; \
	exit $$status

test: install-test
	$(PY) -m pytest -m "not diagnose"

# The slowed-cell and emulated-cluster proofs of docs/diagnose.md (~3 min each on a busy 2-core machine); the suite
# keeps their small real tests (tests/test_expected.py, tests/test_diagnose.py).
test-diagnose: install-test
	$(PY) -m pytest -m diagnose

# Markers registered in setup.cfg: tests that launch or train for real, drive a browser, or are slow.
SLOW_MARKS := e2e or launcher or workload or browser or slow or cluster
test-fast: install-test
	$(PY) -m pytest -m "not ($(SLOW_MARKS))"

# Speed checks. The peer comparison needs torchvision for Horovod's example (pure-Python parts only on CPU torch);
# see docs/measurements.md for benchmarks/compare_peer_pytorch.py and benchmarks/harness_overhead.py.
bench: install-test
	$(PY) -m pip install -q --no-deps torchvision==0.28.0 2> >(grep -v "is ignored" >&2)
	$(PY) -m pytest benchmarks --benchmark-only --benchmark-columns=min,median,max,rounds

clean:
	rm -rf results/bench.db* results/runs reports/*.html reports/*.md reports/*.png
