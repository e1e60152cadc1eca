# The two commands: `make train` (the main job) and `make test` (the suite).
# Both create or reuse .venv and install the pinned stack first (idempotent).
# PYTHON=/path/to/python3.10 overrides how Python 3.10 is found.

VENV        := .venv
PY          := $(VENV)/bin/python
DATA_DIR    := data/synthetic
DATA_ROWS   := 1000000
STRATEGY    := single
RUN_DIR     := runs/$(STRATEGY)-$(shell date +%Y%m%d-%H%M%S)
export TF_CPP_MIN_LOG_LEVEL := 2
export PYTHONUNBUFFERED := 1

.PHONY: setup lint train test test-fast bench soak clean-runs

setup:
	@PYTHON="$(PYTHON)" bash tools/setup_venv.sh

$(DATA_DIR)/metadata.json: | setup
	$(PY) -m dataprep.synthetic --rows $(DATA_ROWS) --output_dir $(DATA_DIR)

train: setup $(DATA_DIR)/metadata.json
	$(PY) -m deepfm.train --strategy $(STRATEGY) --train_data $(DATA_DIR) \
	    --model_dir $(RUN_DIR)/model --export_dir $(RUN_DIR)/export \
	    --metrics_file $(RUN_DIR)/metrics.json --num_epochs 3

# Two test processes (pytest-xdist), each test class in one of them, the slow (multi-process) classes first
# (tests/scheduling.py), so that the run ends on short tests shared out evenly: most multi-process
# tests spend much of their time starting processes and waiting, so two at once halve the run.
# Every run ends with its 25 slowest tests (setup, call and teardown apart) and its 25 tests of most CPU
# (tests/cpu_report.py: on two cores the suite is bound by CPU, not by waits), so that the suite's cost
# stays visible; the per-test timeout (pytest-timeout) is set with pytest's configuration in setup.cfg.
PYTEST = $(PY) -m pytest -q -p no:warnings -n 2 --dist loadscope --durations=25

# The linter and the type checker, configured in pyproject.toml; `make test` runs them first, so that a
# style or type error fails in seconds, not after the suite.
lint: setup
	$(PY) -m ruff check .
	$(PY) -m mypy

test: setup lint
	$(PYTEST) tests

test-fast: setup lint
	$(PYTEST) -m "not slow" tests

# The benchmarks one after the other on the main job's dataset; each writes benchmarks/results/<name>.*
bench: setup $(DATA_DIR)/metadata.json
	$(PY) -m benchmarks.train_single --data_dir $(DATA_DIR)
	$(PY) -m benchmarks.input_speed --data_dir $(DATA_DIR)
	$(PY) -m benchmarks.strategy_speed --data_dir $(DATA_DIR)

# The long soak (docs/reliability.md#soak), outside CI: every multi-process strategy under 20 faults,
# checked to lose nothing; 30 minutes or more. One run, one report: benchmarks/results/soak_seed<N>.{md,json}
# for `make soak SOAK_SEED=N` (the schedule's seed).
SOAK_SEED := 1
SOAK_FLAGS := --strategies ps,hybrid,horovod --faults 20 --references 2 --rows 540000 --epochs 1 \
	--seed $(SOAK_SEED) --name soak_seed$(SOAK_SEED)

soak: setup
	$(PY) -m benchmarks.soak $(SOAK_FLAGS)
