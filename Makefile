# The book's commands. Two do all set-up on a fresh machine:
#   make serve   build the book from the stored outputs and serve it on http://127.0.0.1:8000
#   make test    unit tests, NVRTC compile checks, notebook freshness, book build, HTML check
#                (on a GPU host also the GPU kernel tests and nbval over the TOC's notebooks)
# Readers:   make lab [REFRESH=1]   JupyterLab (with MyST) on lab/, a working copy of chapters/ that git
#            ignores: Run All, autosave and edits there never change the book (.venv-lab, BOOK_RESULTS=lab/results)
# GPU host:  make run [NB="chapters/04-....ipynb"] [BUDGET=540]   re-execute and stamp notebooks in place
# Air-gapped GPU host:  make wheelhouse (on a connected machine), then make gpu-install, make gpu-test

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8000
# make serve listens on this machine only; HOST=0.0.0.0 make serve shares the book with the network
HOST ?= 127.0.0.1
# The reader's JupyterLab: its own virtualenv, so the book's .venv stays exactly what CI tests
LAB_VENV := .venv-lab
LAB_STAMP := $(LAB_VENV)/.installed
LAB_GPU_STAMP := $(LAB_VENV)/.gpu-installed
# On a machine where nvidia-smi lists a GPU, make lab also installs CuPy and PyTorch (LAB_GPU= to skip)
LAB_GPU ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
LAB_ARGS ?=
# Jupyter refuses to run as root unless told; containers often are root, and the server listens on
# 127.0.0.1 with a token, so as root make lab tells it
LAB_AS_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
REFRESH ?=
GPU_PY ?= 3.12
WHEELS ?= .whl
SITE ?= /tmp/site
BUDGET ?=
NB ?=

.PHONY: setup book serve test unit compile check-notebooks build-strict check-html run \
        lab lab-setup wheelhouse gpu-install gpu-test gpu-run clean

# `import utils, kernels` from any directory (chapters/, lab/, /tmp): a .pth file in the venv's
# site-packages puts the repository on sys.path. Unlike `pip install -e .` it needs no network (no
# isolated build of setuptools) and follows the checkout's files as they change.
define put_repo_on_path
	$(1)/bin/python -c "import pathlib, sys, sysconfig; \
	  pathlib.Path(sysconfig.get_paths()['purelib'], 'fa2_book_repo.pth').write_text(sys.argv[1] + '\n')" "$(CURDIR)"
endef

setup: $(STAMP) $(VENV)/.repo-on-path

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

$(VENV)/.repo-on-path: $(STAMP)
	$(call put_repo_on_path,$(VENV))
	touch $@

_static/vendor/.done: scripts/fetch_vendor.sh
	bash scripts/fetch_vendor.sh _static/vendor
	touch $@

book: setup _static/vendor/.done
	$(VENV)/bin/jupyter-book build . --path-output . -q
	@echo "The book is built: open file://$(CURDIR)/_build/html/index.html (or: make serve)"

serve: book
	@echo "The book: file://$(CURDIR)/_build/html/index.html"
	@echo "Serving it on http://$(HOST):$(PORT)/ (Ctrl-C stops)"
	$(PY) -m http.server $(PORT) --bind $(HOST) --directory _build/html

# --- the reader's JupyterLab ---------------------------------------------------------------
# lab/ is a working copy of chapters/ (scripts/lab_copy.py: new chapters are copied in, a copy you
# changed is never overwritten unless REFRESH=1, which first moves it to lab/backup/). Records of runs
# go to lab/results (BOOK_RESULTS), so a GPU run there leaves results/ alone too.
lab: lab-setup
	@echo "JupyterLab on lab/ (your copies; chapters/ is never touched). Ctrl-C stops it."
	BOOK_RESULTS=$(CURDIR)/lab/results $(LAB_VENV)/bin/jupyter lab --ServerApp.root_dir=lab \
	  --ServerApp.ip=127.0.0.1 $(LAB_AS_ROOT) $(LAB_ARGS)

lab-setup: $(LAB_STAMP) $(if $(LAB_GPU),$(LAB_GPU_STAMP))
	$(LAB_VENV)/bin/python scripts/lab_copy.py $(if $(REFRESH),--refresh)
	@# no pop-up asking to fetch Jupyter news, and no update checks
	@mkdir -p $(LAB_VENV)/share/jupyter/lab/settings
	@echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}' \
	  > $(LAB_VENV)/share/jupyter/lab/settings/overrides.json

$(LAB_STAMP): requirements.txt requirements-lab.txt
	$(PYTHON) -m venv $(LAB_VENV)
	$(LAB_VENV)/bin/python -m pip install -q --upgrade pip
	$(LAB_VENV)/bin/python -m pip install -q -r requirements.txt -r requirements-lab.txt
	$(call put_repo_on_path,$(LAB_VENV))
	touch $@

$(LAB_GPU_STAMP): $(LAB_STAMP)
	$(LAB_VENV)/bin/python -m pip install -q cupy-cuda13x torch
	touch $@

# Tests: scripts/test.sh runs unit, check-notebooks, build-strict and check-html in order (and, where
# CuPy in .venv sees a GPU, nbval over the TOC's notebooks), prints a summary, fails if any failed.
test:
	bash scripts/test.sh

unit: setup
	$(PY) -m pytest -q tests

compile: setup
	$(PY) -m pytest -q tests/test_compile.py

check-notebooks: setup
	$(PY) -m utils.stamp

build-strict: setup _static/vendor/.done
	rm -rf _build/html _build/.doctrees _build/jupyter_execute
	$(VENV)/bin/jupyter-book build . --path-output . --warningiserror --keep-going -q

check-html: setup
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
	# CUTLASS/CuTe headers for chapter 13's nvcc build: the wheel alone (its Python needs are not used, and
	# its cuda-python would shadow the host's cuda-bindings)
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: -d $(WHEELS) $(shell grep '^nvidia-cutlass==' requirements.txt)
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
