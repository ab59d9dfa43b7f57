# nanoparallel: `make lab` to learn, `make test` to check everything. See README.md.
PYTHON     ?= python3
VENV       ?= .venv
# The CPU wheel, installed first so that nothing pulls a multi-GB CUDA build.
# Elsewhere, e.g.: make setup TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu124"
TORCH_SPEC ?= torch==2.13.0
BIN        := $(VENV)/bin
# nbgrader shells out to alembic from the venv; keep the venv first on PATH for every recipe.
export PATH := $(abspath $(BIN)):$(PATH)
STAMP      := $(VENV)/.installed
NB         ?=
# Jupyter refuses to run as root without this (containers, CI images); users are rarely root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
ASSIGNMENTS = $(notdir $(wildcard solutions/[0-9]*))

.PHONY: setup lab test test-fast validate release student-release autograde feedback grades bench clean

setup: $(STAMP)

# Reinstalls only when the dependencies change.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

lab: setup
	$(BIN)/jupyter lab --ServerApp.root_dir=course --ServerApp.ip=127.0.0.1 $(ALLOW_ROOT) $(LAB_ARGS)

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The inner loop: the engine, pictures, widgets and pure functions; no notebook is executed or
# autograded and no browser starts (under 2 minutes). `make test` remains the full suite.
test-fast: setup
	$(BIN)/python -m pytest -m "not notebooks and not browser" $(PYTEST_ARGS)

validate: setup
	@test -n "$(NB)" || (echo "usage: make validate NB=course/00_welcome/00_welcome.ipynb" && exit 2)
	$(BIN)/nbgrader validate "$(NB)"

# Regenerates course/ from solutions/ (never edit course/ by hand).
release: setup
	cd autograder && for a in $(ASSIGNMENTS); do nbgrader generate_assignment "$$a" --force --log-level=WARN || exit 1; done

# The bundle to hand out to a graded class: course/, the engine and a Makefile for `make lab`;
# no solutions, hidden tests or autograder (build/nanoparallel-course.tar.gz).
student-release: setup
	$(BIN)/python autograder/student_release.py

# Grades autograder/submitted/<student>/<assignment>/ into grades.csv and feedback/.
autograde: setup
	$(BIN)/python autograder/grade.py

feedback: setup
	$(BIN)/python autograder/grade.py --feedback-only

grades: setup
	cd autograder && nbgrader export --to grades.csv --log-level=WARN

bench: setup
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf build autograder/autograded autograder/integrity autograder/feedback autograder/gradebook.db autograder/grades.csv .pytest_cache
