# Two entry points (see README.md): `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# the CPU wheel that lies on this machine's disk; a bare `pip install torch` pulls a CUDA build
TORCH_PIN ?= torch==2.13.0

.PHONY: setup demo test test-all soak bench docs clean

setup: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e ".[torch,transformers,dev,docs]" "$(TORCH_PIN)"
	touch $@

demo: setup
	$(PY) examples/demo.py

# two pytest processes, one test file each at a time (loadfile keeps a file's tests and fixtures together):
# this 2-core machine ran the suite in 10.5 min in one process, tests waiting on loader workers and
# subprocesses half the time
test: setup
	$(PY) -m pytest -q -n 2 --dist loadfile

soak: setup
	HYPOTHESIS_PROFILE=soak $(PY) -m pytest -q -n 2 --dist loadfile --soak -m slow

bench: setup
	$(PY) benchmarks/run_all.py

docs: setup
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) site .pytest_cache .hypothesis
