"""Build the student bundle: the released course, the engine and what `make lab` needs; no
solutions, hidden tests, mutants, tampering cases or autograder.

    python autograder/student_release.py [--out build] [--until NN]   (or: make student-release [UNTIL=NN])

writes <out>/nanoparallel-course/ and <out>/nanoparallel-course.tar.gz. An instructor hands out the
archive and keeps this repository private: solutions/ holds every answer and every hidden test.

`--until NN` bundles the notebooks 00 to NN only. A later notebook's given code builds on earlier
exercises (07's setup cell has working tensor-parallel layers, the subject of 05's exercises), so a
graded class gets each notebook once the ones it builds on are handed in, as nbgrader courses
release assignments one by one.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "nanoparallel-course"
# The bundle, entry by entry: (source in this repository, name in the bundle).
CONTENTS = [
    (ROOT / "course", "course"),
    (ROOT / "nanoparallel", "nanoparallel"),
    (ROOT / "pyproject.toml", "pyproject.toml"),
    (ROOT / "autograder" / "student" / "Makefile", "Makefile"),
    (ROOT / "autograder" / "student" / "README.md", "README.md"),
]
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.egg-info", "*.so")  # the gate builds where it is installed


def later_than(until: str | None):
    """An ignore function for course/ that leaves out the notebooks numbered above `until`."""
    if until is None:
        return lambda folder, names: set()
    if not (until.isdigit() and len(until) == 2):
        raise ValueError(f"--until takes a notebook's two-digit number, such as 05; got {until!r}")
    known = sorted(p.name[:2] for p in (ROOT / "course").iterdir() if p.name[:2].isdigit())
    if until not in known:
        raise ValueError(f"--until {until}: no notebook has that number (the course has {', '.join(known)})")
    return lambda folder, names: {n for n in names if Path(folder) == ROOT / "course" and n[:2].isdigit() and n[:2] > until}


def build(out: Path, until: str | None = None) -> Path:
    """Write the bundle folder and its archive under `out` (notebooks 00 to `until`, or all);
    return the archive's path."""
    skip_later = later_than(until)
    bundle = out / NAME
    if bundle.exists():
        shutil.rmtree(bundle)
    bundle.mkdir(parents=True)
    for source, name in CONTENTS:
        if source.is_dir():
            shutil.copytree(source, bundle / name,
                            ignore=lambda folder, names: SKIP(folder, names) | skip_later(folder, names))
        else:
            shutil.copy2(source, bundle / name)
    archive = out / f"{NAME}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(bundle, arcname=NAME)
    return archive


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "build"))
    parser.add_argument("--until", help="bundle notebooks 00 to this two-digit number only (default: all)")
    args = parser.parse_args(argv)
    try:
        archive = build(Path(args.out), args.until)
    except ValueError as error:
        parser.error(str(error))
    size = archive.stat().st_size
    print(f"Student bundle: {archive} ({size / 1e6:.1f} MB); folder {archive.parent / NAME}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
