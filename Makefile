# The book's commands. Two do all set-up on a fresh machine:
#   make serve   build the book from the stored outputs and serve it on http://localhost:8000
#   make test    unit tests, NVRTC compile checks, notebook freshness, book build, HTML check
#                (on a GPU host also the GPU kernel tests and nbval over the TOC's notebooks)
# GPU host:  make run [NB="chapters/04-....ipynb"] [BUDGET=540]   re-execute and stamp notebooks
# Air-gapped GPU host:  make wheelhouse (on a connected machine), then make gpu-install, make gpu-test

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8000
GPU_PY ?= 3.12
WHEELS ?= .whl
SITE ?= /tmp/site
BUDGET ?=
NB ?=

.PHONY: setup book serve test unit compile check-notebooks build-strict check-html run \
        wheelhouse gpu-install gpu-test gpu-run clean

setup: $(STAMP)

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

_static/vendor/.done: scripts/fetch_vendor.sh
	bash scripts/fetch_vendor.sh _static/vendor
	touch $@

book: $(STAMP) _static/vendor/.done
	$(VENV)/bin/jupyter-book build . --path-output . -q
	@echo "The book is built: open file://$(CURDIR)/_build/html/index.html (or: make serve)"

serve: book
	@echo "The book: file://$(CURDIR)/_build/html/index.html"
	@echo "Serving it on http://localhost:$(PORT)/ (Ctrl-C stops)"
	$(PY) -m http.server $(PORT) --directory _build/html

# Tests: scripts/test.sh runs unit, check-notebooks, build-strict and check-html in order (and, where
# CuPy in .venv sees a GPU, nbval over the TOC's notebooks), prints a summary, fails if any failed.
test:
	bash scripts/test.sh

unit: $(STAMP)
	$(PY) -m pytest -q tests

compile: $(STAMP)
	$(PY) -m pytest -q tests/test_compile.py

check-notebooks: $(STAMP)
	$(PY) -m utils.stamp

build-strict: $(STAMP) _static/vendor/.done
	rm -rf _build/html _build/.doctrees _build/jupyter_execute
	$(VENV)/bin/jupyter-book build . --path-output . --warningiserror --keep-going -q

check-html: $(STAMP)
	$(PY) scripts/check_html.py _build/html

# --- GPU hosts -------------------------------------------------------------------------------
run:
	PYTHONPATH=$(CURDIR):$$PYTHONPATH $(PYTHON) -m utils.run $(if $(NB),$(NB),--stale) \
	  $(if $(BUDGET),--budget-s $(BUDGET))

wheelhouse:
	rm -rf $(WHEELS) && mkdir -p $(WHEELS)
	$(PYTHON) -m pip download -q --only-binary=:all: --python-version $(GPU_PY) --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  --platform any -d $(WHEELS) -r requirements-gpu-host.txt
	@ls $(WHEELS) | wc -l | xargs echo "wheels in $(WHEELS):"; du -sh $(WHEELS)

gpu-install:
	$(PYTHON) -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
	  --target $(SITE) $(WHEELS)/*.whl
	@echo "installed into $(SITE); use PYTHONPATH=$(SITE)"

gpu-test:
	PYTHONPATH=$(SITE):$(CURDIR):$$PYTHONPATH $(PYTHON) -m pytest -q tests

gpu-run:
	PYTHONPATH=$(SITE):$(CURDIR):$$PYTHONPATH $(PYTHON) -m utils.run $(if $(NB),$(NB),--stale) \
	  $(if $(BUDGET),--budget-s $(BUDGET))

clean:
	rm -rf _build _static/vendor
