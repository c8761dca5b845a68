# Two entry points for a fresh machine: `make reproduce` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: reproduce test calibrate clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

## reproduce: set up and run the main job (today: detector calibration)
reproduce: $(STAMP)
	$(BIN)/aft-bench calibrate

## test: set up and run the test suite
test: $(STAMP)
	$(BIN)/python -m pytest

calibrate: reproduce

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
