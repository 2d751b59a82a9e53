# snpu: the two commands of the README work on a fresh machine with Python 3.11, pip and a
# C++ compiler.  Both create .venv and install the pinned dependencies first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | cksum | cut -d' ' -f1)
BUILD  := build

.PHONY: demo demo-asm train test test-all venv clean docs

venv: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "snpu needs Python >= 3.11"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.installed-*
	touch $@

## demo: the main job end to end: compile the pruned digits CNN, run the 360 test images on
## the golden model and the RTL, print accuracy, cycles and the sparse speedup (see README).
DEMO_IMAGES ?= 360
demo: $(STAMP)
	$(BIN)/python examples/digits/demo.py --out $(BUILD)/digits --rtl-images $(DEMO_IMAGES)

## demo-asm: a hand-written sparse FC program: assemble, run on the golden model, check numpy
demo-asm: $(STAMP)
	$(BIN)/python examples/sparse_fc.py $(BUILD)/demo
	$(BIN)/snpu asm $(BUILD)/demo/sparse_fc.s -o $(BUILD)/demo/sparse_fc.hex
	$(BIN)/snpu sim $(BUILD)/demo/sparse_fc.hex --mem $(BUILD)/demo/mem.bin --expect $(BUILD)/demo/expected.npz

## train: retrain and re-export the digits models (examples/digits/*.onnx, about 40 s)
train: $(STAMP)
	$(BIN)/python examples/digits/train.py

## test: the fast suite CI runs (SNPU_REGRESSION=1 adds the long random regressions)
test: $(STAMP)
	$(BIN)/python -m pytest -q

docs: $(STAMP)
	$(BIN)/python -m snpu.verif.isa > docs/isa.md

clean:
	rm -rf $(BUILD) .pytest_cache
