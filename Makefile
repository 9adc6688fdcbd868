# Building the Transformer: the two commands a reader needs are `make book` and `make test`.
# Everything runs inside .venv, created on first use. `make help` lists the targets: the text after `##` on a
# target's line.

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
STAMP := $(VENV)/.setup-done
BOOK_STAMP := $(VENV)/.setup-book-done
CHAPTERS := $(sort $(wildcard chapters/*.ipynb))
LINT_PATHS := $(wildcard src tests tools bench) $(CHAPTERS)
# nbval runs chapter 10 with its tiny preset; `make test TEST_PRESET=cpu` overrides it.
TEST_PRESET ?= smoke
# nbval runs this many chapters at once (pytest-xdist, a whole notebook per worker), and pytest this many tests;
# TEST_WORKERS=1 runs them one by one.
# OMP_WAIT_POLICY=PASSIVE: an idle OpenMP thread sleeps instead of spinning, so a chapter using two threads does
# not take the other worker's core (measured: nbval 477 s with spinning threads, 332 s without; 660 s one by one).
TEST_WORKERS ?= 2
PRESET ?=
NB ?=

# The kernel spec installed by ipykernel starts `python` from PATH: make it the .venv one.
export PATH := $(BIN):$(PATH)
# Quiet, reproducible runs.
export PYTHONDONTWRITEBYTECODE := 1
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.NOTPARALLEL:

.PHONY: help setup setup-book browser book test lint actionlint pytest nbval test-book export bootstrap dist test-colab colab bump \
	execute train linkcheck clean notebooks times

help: ## this list
	@awk -F ':.*## ' '/^[a-z][a-z-]*:.*## / { printf "  make %-10s %s\n", $$1, $$2 }' $(firstword $(MAKEFILE_LIST))

setup: $(STAMP) browser ## create .venv and install the pinned dependencies (instant when already done)

setup-book: $(BOOK_STAMP) ## only what building the HTML needs (no PyTorch: the build runs no code)

# Re-installs only when pyproject.toml or constraints.txt changed (or .venv is new).
$(STAMP): pyproject.toml constraints.txt pretrained/pyproject.toml
	@test -x $(BIN)/python || { echo "Creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet -c constraints.txt "torch==2.13.0" -e ".[book,dev,lab]"
	$(BIN)/python -m pip install --quiet --no-deps -e pretrained
	@touch $@ $(BOOK_STAMP)

# The book's build reads the notebooks' stored outputs and runs no code: it needs the [book] extra's packages
# and not the package itself, nor PyTorch. The names come from pyproject.toml, the versions from constraints.txt.
# Python itself hands the names to pip (no `xargs -d`, which only GNU xargs has: macOS's rejects it).
$(BOOK_STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || { echo "Creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -c 'import subprocess, sys, tomllib; \
	  book = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["book"]; \
	  subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "-c", "constraints.txt", *book], check=True)'
	@touch $@

# The browser test drives Debian's chromium (Playwright's own browser download needs the internet).
# Installing it is attempted only when it is missing; `make book` does not need it, so this step
# only warns when it cannot install, and `make test-book` stops with the same advice.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "chromium not found: installing Debian's chromium package (apt-get) for the browser test"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else SUDO="none"; fi; \
	  if [ "$$SUDO" != none ] && command -v apt-get >/dev/null 2>&1 \
	     && $$SUDO apt-get update -qq \
	     && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; then \
	    echo "chromium installed: $$(command -v chromium)"; \
	  else \
	    echo "WARNING: could not install chromium (needs apt-get and root or sudo)."; \
	    echo "         Install a Chromium whose binary is called 'chromium' on PATH to run 'make test-book'."; \
	  fi; }

book: setup-book ## build the HTML book into _build/html (warnings are errors; notebooks are not re-run)
	@# Sphinx copies book/static/ only when it writes a page: a change to the stylesheet or the script alone would
	@# not reach _build/html. Touching the landing page makes it write one.
	@for f in book/static/*; do \
	  if [ -f _build/html/_static/$$(basename $$f) ] && ! cmp -s $$f _build/html/_static/$$(basename $$f); then \
	    touch book/intro.md; fi; done
	@# A failed build leaves Sphinx's cache believing the failing pages are done; drop it so the
	@# next run reports the same warnings again instead of passing.
	$(BIN)/jupyter-book build . -W --keep-going || { rm -rf _build/.doctrees; exit 1; }

test: setup lint actionlint pytest nbval dist test-colab book test-book ## ruff, actionlint, pytest, nbval, the package's wheel, a Colab-like run, the book in a browser

lint: setup ## only ruff, on the package, the tests, the tools and the chapters
	$(BIN)/ruff check $(LINT_PATHS)

# The GitHub Actions workflows (.github/workflows/), checked before they ever run on GitHub.
actionlint: setup ## only actionlint, on the GitHub Actions workflows in .github/workflows/
	@test -x $(BIN)/actionlint || { echo "actionlint: not installed in .venv (its wheel is for Linux x86-64 only)"; exit 1; }
	$(BIN)/actionlint -no-color

pytest: setup ## only pytest tests/ (no nbval, no browser test)
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m pytest tests/ -p no:cacheprovider \
	  $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS))

# xdist hands the workers whole notebooks in the order given, so the longest go first: a long chapter started
# last keeps one worker busy while the other idles (measured, pass 1: 627 s in name order, chapter 11's 255 s
# started twelfth; 479 s longest first, for 934 s of cells in all).
NBVAL_LONGEST := 11_one_stack 01_rnn_limits 07_label_smoothing_and_training 10_training_on_gpu 02_attention \
  08_decoding 12_long_sequences
NBVAL_FIRST := $(foreach name,$(NBVAL_LONGEST),$(filter chapters/$(name).ipynb,$(CHAPTERS)))
NBVAL_CHAPTERS := $(NBVAL_FIRST) $(filter-out $(NBVAL_FIRST),$(CHAPTERS))
NBVAL = TRANSFORMER_BOOK_PRESET=$(TEST_PRESET) OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m pytest --nbval $(NBVAL_CHAPTERS) \
	  --nbval-sanitize-with tests/nbval_sanitize.cfg -p tests.nbval_kernel_start -p no:cacheprovider --durations=5 \
	  $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)

# The stored outputs must hold on a reader's CPU too, so nbval runs twice: as this machine runs the chapters, then
# as a different CPU would. ATEN_CPU_CAPABILITY=default replaces PyTorch's vectorised kernels (AVX2, AVX-512) by
# its generic ones, which add in another order, and one thread changes the order of every parallel sum again
# (both change float32 results in their last digits: tests/test_glue.py says why the outputs survive that).
nbval: setup ## only nbval: every chapter run again and compared with its stored outputs, in two passes
ifeq ($(CHAPTERS),)
	@echo "nbval: no notebooks in chapters/ yet"
else
	@echo "nbval, pass 1 of 2: this CPU's kernels, two threads"
	$(NBVAL)
	@echo "nbval, pass 2 of 2: as another CPU would run the chapters (generic kernels, one thread)"
	ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 $(NBVAL)
endif

# The browser test of the built book alone (run `make book` first, or use `make test`). Each worker drives its own
# browser (measured, idle: 194 s one by one, 149 s with two workers).
test-book: setup ## only the browser test of the built book (screenshots in _build/screenshots/)
	@test -f _build/html/index.html || { echo "test-book: no built book in _build/html; run 'make book' first"; exit 1; }
	$(BIN)/python -m pytest tests/browser/test_book.py --book-dir _build/html -p no:cacheprovider \
	  $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS))

export: setup ## write src/transformer_book/ from the chapters' `#| export` cells (nbdev)
	$(BIN)/python tools/export.py

bootstrap: setup ## write every chapter's first cell (the Colab set-up) from tools/bootstrap.py's template
	$(BIN)/python tools/bootstrap.py

# sdist and wheel, checked with the same rules PyPI applies (twine check --strict).
dist: setup ## build the sdist and wheel, and the pretrained translator's wheel, into dist/; check them as PyPI will
	rm -rf dist
	$(BIN)/python -m build --outdir dist . >/dev/null
	$(BIN)/python -m build --wheel --outdir dist pretrained >/dev/null
	$(BIN)/twine check --strict dist/*
	@ls -l dist

# Chapters 1 and 10 in a throwaway Colab-like environment (tools/colab_check.py says how); needs `make dist`.
test-colab: dist ## run chapters 1 and 10 as on Colab: lowest dependencies, local wheels for PyPI, git fallback
	$(BIN)/python tools/colab_check.py --dist dist --work _build/colab-check

# The chapters converted for Colab and plain Jupyter (tools/colab.py): glued numbers written in, boxes as block
# quotes, solutions in <details>, citations and links as text. The book workflow publishes _build/colab/ to the
# branch the Colab buttons open. Like the book, it needs no PyTorch.
colab: setup-book ## write the chapters as Colab opens them (no MyST markup left) into _build/colab/
	$(BIN)/python tools/colab.py --out _build/colab

# The reading copy of the chapters (the Colab copy above) opened in JupyterLab, with .venv's kernel (PATH above).
# Edits there are lost when the copy is written again: the book's source is chapters/. LAB_ARGS reaches JupyterLab
# (for example LAB_ARGS="--no-browser --port 8889").
LAB_ARGS ?=
notebooks: setup colab ## open the chapters in JupyterLab, with their text as the book shows it (_build/colab/)
	$(BIN)/jupyter lab _build/colab/chapters $(LAB_ARGS)

# Each chapter's reading and run times, from its words and its stored execution times (tools/chapter_times.py),
# written into book/generated/chapter_times.md (the landing page includes it) and README.md.
times: setup-book ## write the chapters' reading and run times into the landing page and the README
	$(BIN)/python tools/chapter_times.py

# bump-my-version writes the version into every file [tool.bumpversion] in pyproject.toml lists.
bump: setup ## write a new version everywhere: make bump VERSION=x.y.z
	@test -n "$(VERSION)" || { echo "usage: make bump VERSION=x.y.z"; exit 2; }
	$(BIN)/bump-my-version bump --new-version $(VERSION) || { \
	  echo "make bump: failed; VERSION must read x.y.z or x.y.zrcN ([tool.bumpversion] parse in pyproject.toml)"; exit 1; }
	@echo "version: now $(VERSION) everywhere; run make test, commit, then tag v$(VERSION) (CONTRIBUTING.md: Releasing)"

execute: setup ## re-run the chapters in place to refresh their stored outputs (NB=chapters/x.ipynb for one)
	$(if $(PRESET),TRANSFORMER_BOOK_PRESET=$(PRESET)) $(BIN)/python tools/execute.py $(or $(NB),$(CHAPTERS))

train: setup ## train the chapter 10 model from the command line (PRESET=smoke|cpu|gpu, default cpu)
	$(BIN)/python -m transformer_book train --preset $(or $(PRESET),cpu) --out runs/multi30k

linkcheck: setup ## check external links (needs internet)
	$(BIN)/jupyter-book build . --builder linkcheck

clean: ## remove _build/ and dist/
	rm -rf _build dist
