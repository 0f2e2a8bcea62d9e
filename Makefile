# Two entry points; both install what they need first and are safe to repeat.
#   make run   - set up, run matrix.yaml (the cells this machine can run), then regenerate the report
#   make test  - set up (plus test tools), lint, and run the whole test suite but the `diagnose` proofs, in
#                two phases (below): 34-36 minutes on a 2-core machine
#   make lint  - ruff and isort over the code (seconds)
#   make test-diagnose - the slowed-cell and emulated-cluster proofs of docs/diagnose.md (minutes each)
#   make test-fast - the same set-up, then only the unit and contract tests (pytest --fast: no test with a mark
#                    registered in setup.cfg) on two workers: the inner loop, about 2 minutes on a 2-core machine
#                    with the set-up done (docs/lab/2026-12-06-suite-two-phases.md)
#   make gpu-build   - Horovod with NCCL compiled here with no GPU, in .venv-gpu (CUDA torch, NCCL wheel), then
#                    checked: nccl_built() and ldd (docs/gpu.md)
#   make device-kit  - fills device-kit/ with what an offline GPU machine lacks, for scripts/gpu_session.sh
#   make device-kit-wheels - only the kit's wheels: enough for a transformer loan (gpu_session.sh --skip build,data)
#   make images      - the three cpu container images built with podman and checked inside (docker/README.md)
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: run test lint test-fast test-diagnose install install-test bench clean gpu-build device-kit device-kit-wheels \
	gpu-rehearsal images

install:
	@scripts/install.sh run

install-test:
	@scripts/install.sh test

run: install
	@status=0; $(PY) -m bench run matrix.yaml || status=$$?; \
	$(PY) -m bench report; \
	echo "store: results/bench.db   report: reports/index.html (also reports/summary.md)"; \
	echo "the results, a line per cell: $(PY) -m bench status"; \
	exit $$status

# Lint, in seconds: ruff (pyflakes' unused imports and names, pycodestyle, lines over 120 columns; pyproject.toml) and
# isort's order in the project's wrapped style (setup.cfg). The first step of `make test`.
LINTED := bench models tests benchmarks scripts
lint: install-test
	$(PY) -m ruff check --quiet $(LINTED)
	$(PY) -m isort --check-only --diff --quiet $(LINTED)

# Two phases. First everything that can share the machine, on $(TEST_WORKERS) pytest-xdist workers, a test module per
# worker at a time (--dist loadfile: its module fixtures built once; tests/conftest.py starts the longest first): many
# tests wait on processes they start (launchers, timeouts, sshd, a browser) and leave a core idle. A worker that runs
# an emulated-cluster test brings up a cluster of its own (tests/cluster.py names each after its pytest process).
# Then, one at a time, the tests that compare rates or time a fault into a window (mark `alone`), which another
# worker's load would skew. Both phases always run; the target fails if either did.
# --durations: the slowest tests named in every CI log, so a test that starts to cost minutes is seen (the suite must
# stay within CI's time on 2 cores).
TEST_WORKERS ?= 2
test: install-test lint
	@status=0; \
	$(PY) -m pytest -m "not diagnose and not alone" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--durations=30 || status=$$?; \
	$(PY) -m pytest -m "alone and not diagnose" --durations=30 || status=$$?; \
	exit $$status

# The slowed-cell and emulated-cluster proofs of docs/diagnose.md (~3 min each on a busy 2-core machine); the suite
# keeps their small real tests (tests/test_expected.py, tests/test_diagnose.py).
test-diagnose: install-test
	$(PY) -m pytest -m diagnose

# --fast (tests/conftest.py): leaves out every mark registered in setup.cfg (tests that launch or train for real,
# drive a browser, build, or take minutes: the diagnose proofs too), read from setup.cfg so the two cannot drift.
test-fast: install-test
	$(PY) -m pytest --fast -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Speed checks. The peer comparison needs torchvision for Horovod's example (pure-Python parts only on CPU torch);
# see docs/measurements.md for benchmarks/compare_peer_pytorch.py and benchmarks/harness_overhead.py.
bench: install-test
	$(PY) -m pip install -q --no-deps torchvision==0.28.0 2> >(grep -v "is ignored" >&2)
	$(PY) -m pytest benchmarks --benchmark-only --benchmark-columns=min,median,max,rounds

# Not part of `make test`: several GB of CUDA wheels and a ~10 min compile. The suite's gpu_build test checks what
# it left, when it is there (tests/test_gpu_build.py).
gpu-build:
	@scripts/install.sh build-tools
	@scripts/gpu_build.sh

# The main venv first: the kit's ImageNet sample is made by bench itself (bench/execution/datasets.py).
device-kit: install
	@scripts/device_kit.sh

device-kit-wheels: install
	@scripts/device_kit.sh --wheels-only

# scripts/gpu_session.sh's phases here, on a stand-in for the GPU machine's Python (no GPU): before a loan is spent.
gpu-rehearsal: device-kit
	@scripts/gpu_rehearsal.sh

clean:
	rm -rf results/bench.db* results/runs reports/*.html reports/*.md reports/*.png

# Container images (docker/README.md): the three cpu variants built with podman (or docker), then a 2-worker PyTorch
# cell run inside each as the unprivileged `bench` user. IMAGE_BASE: the base image; the default is made here from
# Debian's packages by scripts/debian_base.sh (no container registry is reachable from the development machines).
# IMAGE_TORCH_INDEX: empty = torch's +cpu build comes from the host's pip settings (a find-links folder here); set it
# to https://download.pytorch.org/whl/cpu where that index is reachable.
IMAGE_BASE ?= localhost/debian:bookworm
IMAGE_TORCH_INDEX ?=
CPU_IMAGES := pt-tf-openmpi-cpu pt-tf-mpich-cpu pt-tf-intelmpi-cpu
images:
	@scripts/install.sh images
	@if [ "$(IMAGE_BASE)" = localhost/debian:bookworm ] && ! podman image exists $(IMAGE_BASE) 2>/dev/null; then \
	  scripts/debian_base.sh $(IMAGE_BASE); fi
	$(PY) -m bench images build --check --base "$(IMAGE_BASE)" --torch-index "$(IMAGE_TORCH_INDEX)" $(CPU_IMAGES)
