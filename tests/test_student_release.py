"""The student bundle (`make student-release`) holds the course and the engine, and no answer.

Checked on the built bundle: its entries (no solutions/, tests/ or autograder/); no nbgrader
markers, no distinctive line of any hidden-test block and no whole solution block anywhere in it;
its notebooks are the released course; its Makefile sets up and
opens the course from the bundle alone; the engine imports from it.
"""
from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "autograder"))
import student_release  # noqa: E402


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    archive = student_release.build(out)
    return archive, out / student_release.NAME


def _normal(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def instructor_only() -> tuple[set[str], list[str]]:
    """(distinctive hidden-test lines, every solution block of two lines or more), normalised."""
    hidden, solutions, shown = set(), [], set()
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            block, kind = [], None
            for line in cell.source.splitlines():
                stripped = line.strip()
                if stripped in ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"):
                    block, kind = [], stripped
                elif stripped in ("### END SOLUTION", "### END HIDDEN TESTS"):
                    if kind == "### BEGIN HIDDEN TESTS":
                        hidden |= {x for x in _normal("\n".join(block)) if len(x) >= 30}
                    elif len(_normal("\n".join(block))) >= 2:
                        solutions.append("\n".join(_normal("\n".join(block))))
                    kind = None
                elif kind:
                    block.append(line)
                else:
                    shown.add(stripped)
    # A hidden check may repeat a line the visible part shows, or a line of the engine.
    engine = {line.strip() for path in (ROOT / "nanoparallel").rglob("*.py") for line in path.read_text().splitlines()}
    hidden -= shown | engine
    assert len(hidden) > 100 and len(solutions) > 40, "expected many hidden checks and solution blocks"
    return hidden, solutions


def test_bundle_holds_the_course_and_the_engine_only(bundle):
    archive, folder = bundle
    assert sorted(p.name for p in folder.iterdir()) == ["Makefile", "README.md", "course", "nanoparallel",
                                                        "pyproject.toml"]
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert all(n.split("/")[0] == student_release.NAME for n in names)
    assert not [n for n in names if n.split("/")[1:2] in (["solutions"], ["tests"], ["autograder"])]
    for path in sorted((ROOT / "course").glob("*/*.ipynb")):
        assert (folder / "course" / path.parent.name / path.name).read_bytes() == path.read_bytes()


def test_bundle_holds_no_solution_or_hidden_test(bundle):
    _, folder = bundle
    hidden, solutions = instructor_only()
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, path
        if path.suffix == ".ipynb":
            text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
        lines = _normal(text)
        leaked = sorted(set(lines) & hidden)
        assert not leaked, f"{path.relative_to(folder)} holds hidden-test lines: {leaked[:3]}"
        joined = "\n".join(lines)
        shown = [block for block in solutions if block in joined]
        assert not shown, f"{path.relative_to(folder)} holds a solution block: {shown[0][:200]}"


def test_bundle_sets_up_and_opens_the_course_on_its_own(bundle):
    _, folder = bundle
    plan = subprocess.run(["make", "-n", "lab"], cwd=folder, capture_output=True, text=True)
    assert plan.returncode == 0, plan.stderr
    assert "-m venv .venv" in plan.stdout and '-e ".[course]"' in plan.stdout
    assert "jupyter lab --ServerApp.root_dir=course --ServerApp.ip=127.0.0.1" in plan.stdout
    readme = (folder / "README.md").read_text()
    assert "make lab" in readme and "tar xzf nanoparallel-course.tar.gz" in readme
    done = subprocess.run([sys.executable, "-c", "import nanoparallel, sys; print(nanoparallel.__file__)"],
                          cwd=folder, capture_output=True, text=True, env={"PYTHONPATH": str(folder), "PATH": ""})
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(folder)


def test_a_bundle_until_a_notebook_holds_that_notebook_and_the_ones_before_it(tmp_path):
    student_release.build(tmp_path, until="05")
    released = sorted(p.name for p in (tmp_path / student_release.NAME / "course").iterdir())
    everything = sorted(p.name for p in (ROOT / "course").iterdir() if p.name[:2].isdigit())
    assert released == [name for name in everything if name[:2] <= "05"] and len(released) == 6
    for bad, says in (("5", "two-digit number"), ("99", "no notebook has that number")):
        with pytest.raises(ValueError, match=says):
            student_release.build(tmp_path, until=bad)
