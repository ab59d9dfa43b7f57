"""Build the student bundle: the released course, the engine and what `make lab` needs; no
solutions, hidden tests, mutants, tampering cases or autograder.

    python autograder/student_release.py [--out build]   (or: make student-release)

writes <out>/nanoparallel-course/ and <out>/nanoparallel-course.tar.gz. An instructor hands out the
archive and keeps this repository private: solutions/ holds every answer and every hidden test.
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
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.egg-info")


def build(out: Path) -> Path:
    """Write the bundle folder and its archive under `out`; return the archive's path."""
    bundle = out / NAME
    if bundle.exists():
        shutil.rmtree(bundle)
    bundle.mkdir(parents=True)
    for source, name in CONTENTS:
        if source.is_dir():
            shutil.copytree(source, bundle / name, ignore=SKIP)
        else:
            shutil.copy2(source, bundle / name)
    archive = out / f"{NAME}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(bundle, arcname=NAME)
    return archive


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "build"))
    args = parser.parse_args(argv)
    archive = build(Path(args.out))
    size = archive.stat().st_size
    print(f"Student bundle: {archive} ({size / 1e6:.1f} MB); folder {archive.parent / NAME}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
