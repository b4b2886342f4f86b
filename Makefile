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

# The shipped demo checkpoint's recipe (about 28 minutes on 2 cores; docs/demo-model.md) into
# runs/demo-model/model (configs/demo.toml's own out_dir), beside the shipped one, then its mean over the four held-out samples to compare with
# the shipped checkpoint's (README). A run stopped part-way continues with its own command and --resume.
DEMO_RUN := runs/demo-model
demo-model: $(DEMO_RUN)/samples.json
	@echo "made $(DEMO_RUN)/model; the shipped checkpoint scores as README says"

$(DEMO_RUN)/model/model.safetensors: | $(STAMP)
	$(PY) -m dlm.train --config configs/demo.toml --out $(DEMO_RUN)/model

$(DEMO_RUN)/samples.json: $(DEMO_RUN)/model/model.safetensors
	$(PY) -m dlm.eval --model $(DEMO_RUN)/model --samples --efforts medium --json $@

clean:
	rm -rf $(VENV)
