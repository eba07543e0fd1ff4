# Two commands do everything on a fresh machine with Python >= 3.10:
#   make lab    install (first time only) and open the series in JupyterLab
#   make test   install (first time only) and run every test, notebooks included
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Google Colab's ipywidgets, for tests/display/test_ipywidgets7.py: installed beside the environment (pip --target),
# without dependencies (the rest is the environment's; ipywidgets 7 also imports ipython_genutils)
WIDGETS7       ?= .venv-ipywidgets7
WIDGETS7_PINS  := ipywidgets==7.7.1 ipython_genutils==0.2.0
WIDGETS7_STAMP := $(WIDGETS7)/.installed
# JupyterLab saves widget cells with a static picture (mha_lib/display/static_widgets.py: a pre-save hook, and
# ipywidgets' saveState setting), so a notebook that was run, saved and reopened shows no widget error
JUPYTER_CONFIG := $(VENV)/etc/jupyter/jupyter_server_config.d/mha_lib.json

.PHONY: lab test test-fast test-newest notebooks benchmarks checkpoints slides install clean

lab: $(STAMP) $(JUPYTER_CONFIG)
	$(BIN)/jupyter lab notebooks/00_start_here.ipynb

# The edit loop: the library core's tests only (tests/core/: no notebook, no kernel, no browser), under 30 s
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) tests/core

# one pytest-xdist worker per core; each test file (each notebook) runs whole on one worker, the longest first
# (tests/conftest.py); the 15 slowest tests are listed at the end, to see where the time goes as the series grows
PYTEST_WORKERS ?= auto
test: $(STAMP) $(WIDGETS7_STAMP) $(JUPYTER_CONFIG)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=15

# Every notebook on the newest releases, in a throw-away venv (the wheel with its `notebooks` extra unpinned, and
# d2l without its dependencies): prints the versions and a PASS/FAIL line per notebook; several GB, minutes.
test-newest:
	$(PYTHON) tests/run_newest.py

# Re-execute every notebook in place (deterministic outputs) and redraw the README figure.
notebooks: $(STAMP)
	$(BIN)/python tests/refresh_notebooks.py

# Re-measure speed, memory, import time (chapter 9), KV-cache generation (chapter 12) and the memory wall (chapter 14)
# into mha_lib/benchmark_results/, then refresh chapters 9, 12 and 14 (and their twins), which print them.
benchmarks: $(STAMP)
	$(BIN)/python tests/benchmarks/run_all.py --quiet-below 10

# Retrain chapter 11's three tiny models on the CPU (about a minute, deterministic) into mha_lib/induction/checkpoints/.
checkpoints: $(STAMP)
	$(BIN)/python tests/train_induction.py

# One reveal.js deck per chapter in build/slides/ (works offline: copy the whole folder). Teacher's guide:
# notebooks/TEACHERS_GUIDE.md, rewritten by `make notebooks`.
slides: $(STAMP)
	$(BIN)/python tests/slides.py --out build/slides

# The Chinese edition's bookkeeping (tests/translations.py): extract mha_lib's messages into the catalogs, compile
# them, then list what is left to translate, which English chapters have no twin in notebooks/zh-CN/ and which
# twin cells are stale (their English cell changed since they were translated).
.PHONY: translations
translations: $(STAMP)
	$(BIN)/python tests/translations.py extract
	$(BIN)/python tests/translations.py compile
	$(BIN)/python tests/translations.py status

install: $(STAMP) $(WIDGETS7_STAMP) $(JUPYTER_CONFIG)

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-nodeps.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (mha_lib)"
	$(BIN)/python -m mha_lib.display.fonts
	$(BIN)/python -m mha_lib.llm.smollm2
	touch $(STAMP)

$(JUPYTER_CONFIG): mha_lib/display/static_widgets.py | $(STAMP)
	$(BIN)/python -m mha_lib.display.static_widgets --install-jupyter-config

$(WIDGETS7_STAMP): Makefile | $(STAMP)
	rm -rf $(WIDGETS7)
	$(BIN)/python -m pip install --quiet --no-deps --target $(WIDGETS7) $(WIDGETS7_PINS)
	touch $(WIDGETS7_STAMP)

clean:
	rm -rf $(VENV) $(WIDGETS7)
