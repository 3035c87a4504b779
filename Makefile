# VND flight stack: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PKGS := vnd_core vnd_flight vnd_ros vnd_encoder vnd_policy vnd_learner vnd_sim vnd_bridges vnd_tools
STAMP := $(VENV)/.installed
# rclpy from the ROS 2 Jazzy PyPI wheels plus vnd_msgs built for it (scripts/ros_wheels.py).
ROS_STAMP := $(VENV)/.ros-msgs.stamp
ROS_INPUTS := requirements-ros.txt scripts/ros_wheels.py ros2_ws/src/vnd_msgs/CMakeLists.txt \
	ros2_ws/src/vnd_msgs/package.xml $(wildcard ros2_ws/src/vnd_msgs/msg/*.msg) \
	$(wildcard ros2_ws/src/vnd_ros/vnd_ros/msg_defs/*/msg/*.msg)
# Where rclpy from the wheels finds its libraries (LD_LIBRARY_PATH) and RMW (RMW_IMPLEMENTATION),
# and the loopback Fast DDS profile: evaluated after `make ros`.
ROS_ENV = set -a && eval "$$($(PY) scripts/ros_wheels.py env --venv $(VENV))" && set +a
# Every DDS participant we start stays on loopback (docs/operator_runbook.md, section 3).
export CYCLONEDDS_URI ?= file://$(CURDIR)/config/cyclonedds_loopback.xml
export FASTDDS_DEFAULT_PROFILES_FILE ?= $(CURDIR)/config/fastdds_loopback.xml
export FASTRTPS_DEFAULT_PROFILES_FILE ?= $(CURDIR)/config/fastdds_loopback.xml
export VND_MIDDLEWARE ?= dds
# Control nodes and tests run torch single-threaded; the learner bounds its own threads.
export OMP_NUM_THREADS ?= 1

.PHONY: setup ros test test-all demo bench lint format clean

setup: $(STAMP)

$(STAMP): requirements.txt $(foreach p,$(PKGS),ros2_ws/src/$(p)/setup.py)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	# Uninstall first: when a console script moves between workspace packages (vnd did), the old
	# package's uninstall would otherwise delete the script the new one just installed.
	$(PY) -m pip uninstall --quiet -y $(PKGS) >/dev/null 2>&1 || true
	$(PY) -m pip install --quiet --no-build-isolation --no-deps $(foreach p,$(PKGS),-e ros2_ws/src/$(p))
	touch $(STAMP)

# Wheels, the Export.cmake fix and the message build; the stamp skips all of it when nothing
# changed (a cold run takes minutes, a warm one a second).
ros: $(ROS_STAMP)

$(ROS_STAMP): $(STAMP) $(ROS_INPUTS)
	$(PY) scripts/ros_wheels.py install --venv $(VENV)

# pytest exits 5 when it collected nothing: that is a failure here, never a pass.
test: setup ros
	$(ROS_ENV) && $(PY) -m pytest -q ; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected: failing"; exit 1; fi; exit $$rc

demo: setup
	$(VENV)/bin/vnd fly --scenario recurring_wind --start observer

# Each benchmark's output (its last line is one JSON object) goes to runs/bench/<stamp>/ (not
# tracked by git); benchmarks/README.md says which figure each one gives. one_update.py needs a
# recorded run folder, so it runs by hand.
BENCHES := $(filter-out benchmarks/one_update.py,$(wildcard benchmarks/*.py))
bench: setup
	out=runs/bench/$$(date +%Y%m%d_%H%M%S) && mkdir -p $$out && \
	for b in $(BENCHES); do echo "== $$b"; $(PY) $$b | tee $$out/$$(basename $$b .py).log; done

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mypy

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
