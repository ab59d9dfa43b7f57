# nanoparallel: `make lab` to learn, `make test` to check (and `make test-grader`, as CI does). See README.md.
# setup, lab and validate: the same recipes the student bundle ships (autograder/student/Makefile),
# with the test and grading tools on top.
EXTRAS     := dev
include autograder/student/Makefile
ASSIGNMENTS = $(notdir $(wildcard solutions/[0-9]*))

.PHONY: test test-grader test-fast release student-release autograde feedback grades bench clean

# Everything but the autograder's own hard cases, within 15 minutes on 2 cores (docs/testing.md,
# "Two tiers").
test: setup
	$(BIN)/python -m pytest -m "not grader" $(PYTEST_ARGS)

# The autograder's own hard cases: the tampering corpus (tests/tampering/, every case graded in
# its sandbox), each notebook's hostile submission and a wrong answer through the grader, and a
# class graded side by side, resumed and in shards. CI runs it after
# `make test` (.ci/run); run it after any change to the grader or its guard.
test-grader: setup
	$(BIN)/python -m pytest -m grader $(PYTEST_ARGS)

# The inner loop: the engine, pictures, widgets and pure functions; no notebook is executed or
# autograded and no browser starts (about 3 minutes on 2 cores).
test-fast: setup
	$(BIN)/python -m pytest -m "not notebooks and not browser" $(PYTEST_ARGS)

# Regenerates course/ from solutions/ (never edit course/ by hand).
release: setup
	cd autograder && for a in $(ASSIGNMENTS); do nbgrader generate_assignment "$$a" --force --log-level=WARN || exit 1; done

# The bundle to hand out to a graded class: course/, the engine and a Makefile for `make lab`;
# no solutions, hidden tests or autograder (build/nanoparallel-course.tar.gz). UNTIL=05 bundles
# notebooks 00 to 05 only (release a notebook once the ones it builds on are handed in).
student-release: setup
	$(BIN)/python autograder/student_release.py $(if $(UNTIL),--until $(UNTIL),)

# Grades autograder/submitted/<student>/<assignment>/ into grades.csv and feedback/, each
# submission in a sandbox (autograder/sandbox.py), JOBS at a time (default: one more than the cores), and
# only what is new or changed since the last run. SANDBOX=off opts out of the sandbox, and says so
# in the grades. More (--force, --shard K/N, --merge): python autograder/grade.py --help.
autograde: setup
	$(BIN)/python autograder/grade.py $(if $(filter off,$(SANDBOX)),--no-sandbox,) $(if $(JOBS),--jobs $(JOBS),)

feedback: setup
	$(BIN)/python autograder/grade.py --feedback-only

grades: setup
	cd autograder && nbgrader export --to grades.csv --log-level=WARN

bench: setup
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf build autograder/autograded autograder/integrity autograder/feedback autograder/gradebook.db autograder/grades.csv autograder/.grading autograder/shards .pytest_cache
