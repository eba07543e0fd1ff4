# Two commands do everything on a fresh machine with Python >= 3.10:
#   make lab    install (first time only) and open the series in JupyterLab
#   make test   install (first time only) and run every test, notebooks included
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: lab test notebooks install clean

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/00_start_here.ipynb

test: $(STAMP)
	$(BIN)/python -m pytest

# Re-execute every notebook in place (deterministic outputs) and redraw the README figure.
notebooks: $(STAMP)
	$(BIN)/python tests/refresh_notebooks.py

install: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-nodeps.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (mha_lib)"
	touch $(STAMP)

clean:
	rm -rf $(VENV)
