import json
import warnings

import matplotlib.pyplot as plt
import pytest

from background import Background
from mutation_run import RESULT as MUTATION_RESULT
from nanoparallel import Cluster


@pytest.fixture(scope="session")
def cluster():
    """One 4-rank cluster for the engine tests; tests that need another size call resize().
    Deadlocks wait for the whole deadline here (no stall detection), whatever the environment."""
    with Cluster(world_size=4, timeout=5.0, stall_timeout=0) as c:
        yield c


@pytest.fixture
def cluster4(cluster):
    cluster.resize(4) if cluster.world_size != 4 else None
    return cluster


@pytest.fixture
def quiet_pictures(capsys):
    """For picture and widget tests: no pyplot figure left open, nothing on stderr, no warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert plt.get_fignums() == []
    assert capsys.readouterr().err == ""
    assert [str(w.message) for w in caught] == []


BACKGROUND = pytest.StashKey()  # the session's Background, for the terminal summary
READS_BACKGROUND = {"graded", "mutated", "nbval"}  # the fixtures that wait on a background job


def pytest_collection_modifyitems(items):
    """Tests that read a background job run last, in their own order: until then the foreground
    does its own work beside the background instead of waiting on a job that has not finished."""
    items.sort(key=lambda item: bool(READS_BACKGROUND & set(getattr(item, "fixturenames", ()))))


@pytest.fixture(scope="session", autouse=True)
def background(request, tmp_path_factory):
    """Starts, before the session's first test, the round trips and the nbval run that its tests
    will read (tests/background.py); they run while the other tests do."""
    classes, mutated, nbval, added_by = {}, set(), False, set()
    for item in request.session.items:
        needs = getattr(item, "fixturenames", ())
        nbval |= "nbval" in needs
        if "mutated" in needs and hasattr(item, "callspec"):
            mutated.add(item.callspec.params["assignment"])
        if "graded" in needs and hasattr(item, "callspec"):
            # One class per assignment, whatever test modules add to it: a run of grade.py has a
            # fixed cost (nbgrader, the gradebook, the workers), and honest and hostile
            # submissions graded side by side is what an instructor's class is.
            assignment = item.callspec.params["assignment"]
            if (item.module.__name__, assignment) not in added_by:
                added_by.add((item.module.__name__, assignment))
                students = classes.setdefault(assignment, {})
                added = item.module.submissions(assignment)
                clash = set(students) & set(added)
                assert not clash, f"{item.module.__name__} adds students to {assignment}'s class that another module has: {clash}"
                students.update(added)
    jobs = Background(tmp_path_factory.mktemp("background"))
    jobs.start(classes, sorted(mutated), nbval)
    request.config.stash[BACKGROUND] = jobs
    yield jobs
    jobs.close()


def pytest_terminal_summary(terminalreporter, config):
    jobs = config.stash.get(BACKGROUND, None)
    if jobs is not None and jobs.runs:
        terminalreporter.write_sep("-", "background jobs (tests/background.py), seconds each ran")
        for line in jobs.timings():
            terminalreporter.write_line(line)


@pytest.fixture
def graded(background):
    """graded(assignment) -> the `Finished` round trip of `assignment`'s class, which holds every
    test module's submissions of it (`.root`: the autograder folder they were graded in;
    `.stdout`: grade.py's progress lines); fails the test with grade.py's output if grading failed."""
    def wait(assignment: str):
        done = background.result(("class", assignment))
        print(done.stdout)
        if done.returncode != 0:
            pytest.fail(f"autograding {assignment} failed:\n{done.stdout}\n{done.stderr}")
        return done
    return wait


@pytest.fixture
def mutated(background):
    """mutated(assignment) -> the outcome of tests/mutation_run.py on `assignment` (its JSON
    result); fails the test with the run's output if it did not finish."""
    def wait(assignment: str) -> dict:
        done = background.result(("mutants", assignment))
        results = [line for line in done.stdout.splitlines() if line.startswith(MUTATION_RESULT)]
        if done.returncode != 0 or not results:
            pytest.fail(f"trying the mutants of {assignment} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return json.loads(results[-1][len(MUTATION_RESULT):])
    return wait


@pytest.fixture
def nbval(background):
    """The `Finished` run of nbval over solutions/ (tests/background.py)."""
    return background.result("nbval")
