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

# The shipped demo checkpoint's recipe, its three stages in a row (about 50 minutes on 2 cores;
# docs/demo-model.md), into runs/demo-model/ beside the shipped one, then its held-out eval to compare.
# A stage whose checkpoint exists is not run again: after a failure `make demo-model` starts at the stage that
# failed (its own command with --resume continues one that had saved its state).
DEMO_RUN := runs/demo-model
demo-model: $(DEMO_RUN)/final/eval.json
	@echo "made $(DEMO_RUN)/final; the shipped checkpoint scores as dlm/assets/demo/eval.json says"

$(DEMO_RUN)/base/model.safetensors: | $(STAMP)
	$(PY) -m dlm.train --config configs/demo.toml --out $(DEMO_RUN)/base

$(DEMO_RUN)/spelling/model.safetensors: $(DEMO_RUN)/base/model.safetensors
	$(PY) -m dlm.train --config configs/demo-finetune-spelling.toml --init-from $(DEMO_RUN)/base --out $(DEMO_RUN)/spelling

$(DEMO_RUN)/final/model.safetensors: $(DEMO_RUN)/spelling/model.safetensors
	$(PY) -m dlm.train --config configs/demo-finetune.toml --init-from $(DEMO_RUN)/spelling --out $(DEMO_RUN)/final

$(DEMO_RUN)/final/eval.json: $(DEMO_RUN)/final/model.safetensors
	$(PY) -m dlm.eval --model $(DEMO_RUN)/final --limit 200 --efforts medium,high --json $@

clean:
	rm -rf $(VENV)
