# `make run` and `make test` each do all the set-up on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lint demo-model clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	# torch first, pinned, so no resolver step can pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m voice serve

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

demo-model: $(STAMP)
	$(PY) -m dlm.train --config configs/demo.toml

clean:
	rm -rf $(VENV)
