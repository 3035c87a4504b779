# VND flight stack: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PKGS := vnd_core vnd_ros vnd_encoder vnd_policy vnd_learner vnd_sim vnd_bridges
STAMP := $(VENV)/.installed
# Every DDS participant we start stays on loopback (DESIGN.md section 2).
export CYCLONEDDS_URI ?= file://$(CURDIR)/config/cyclonedds_loopback.xml
export VND_MIDDLEWARE ?= dds
# Control nodes and tests run torch single-threaded; the learner bounds its own threads.
export OMP_NUM_THREADS ?= 1

.PHONY: setup test test-all demo bench lint format clean

setup: $(STAMP)

$(STAMP): requirements.txt $(foreach p,$(PKGS),ros2_ws/src/$(p)/setup.py)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-build-isolation --no-deps $(foreach p,$(PKGS),-e ros2_ws/src/$(p))
	touch $(STAMP)

# pytest exits 5 when it collected nothing: that is a failure here, never a pass.
test: setup
	$(PY) -m pytest -q ; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected: failing"; exit 1; fi; exit $$rc

demo: setup
	$(VENV)/bin/vnd fly --scenario recurring_wind

bench: setup
	mkdir -p benchmarks/results
	for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b | tee benchmarks/results/$$(date +%Y%m%d)_$$(basename $$b .py).json.log; done

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
