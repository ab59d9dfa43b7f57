"""The package's layout: three concerns in three folders, the arrows between them as
docs/architecture.md draws them, no import circles, and the old module names still working.

The import graph is read from the source (every `import`, at module level or inside a function,
except under `if TYPE_CHECKING:`, and `importlib.import_module("a literal name")`), so an import
hidden in a function counts as an arrow too.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nanoparallel"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LONG = 80  # lines; a longer function says why in a comment starting "# Long:" just above it


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
# Extension modules in C (grading/_gate.c): imported like any module, importing none of the engine's.
MODULES.update({module_name(p): p for p in sorted(PACKAGE.rglob("*.c"))})


def imports(path: Path) -> set[str]:
    """The engine modules `path` imports (the module itself where `from package import module`)."""
    if path.suffix != ".py":
        return set()
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "importlib.import_module" \
                and node.args and isinstance(node.args[0], ast.Constant):
            names = [node.args[0].value]  # an import by name, as a lazy export makes it
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES]
            # `from package import module` imports the module; `from module import name`, the module
            names = submodules if len(submodules) == len(node.names) else [node.module] + submodules
        else:
            continue
        found |= {n for n in names if n in MODULES}
    return found - {module_name(path)}


GRAPH = {name: imports(path) for name, path in MODULES.items()}


def folder(module: str) -> str:
    """The concern a module belongs to: runtime, grading's witness or its tooling, lessons, or the
    package's own top level."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in ("runtime", "grading", "lessons"):
        return "nanoparallel"
    if len(parts) == 2:
        return parts[1] if parts[1] != "grading" else "grading (tooling)"
    if parts[1] == "grading":
        return "grading (witness)" if parts[2] in WITNESS else "grading (tooling)"
    return parts[1]


WITNESS = {"guard", "rank_guard", "provenance", "originals", "comm_witness", "rank_channels", "registrations",
           "thread_states", "library_containers", "engine_fields", "signal_handlers", "sealed", "_gate"}


def documented_arrows() -> set[tuple[str, str]]:
    """The arrows docs/architecture.md lists, one per line: `- from -> to`."""
    text = ARCHITECTURE.read_text()
    block = text.split("<!-- arrows -->")[1]
    return {tuple(s.strip() for s in m.groups()) for m in re.finditer(r"^- (.+?) -> (.+?)$", block, re.M)}


def test_each_folder_holds_one_concern():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
    assert folders == {"runtime", "grading", "lessons"}, folders
    top = {p.name for p in PACKAGE.glob("*.py")}
    assert top == {"__init__.py", "_old_names.py"}, f"modules outside the three folders: {top}"


def test_no_import_circles():
    state, stack, circles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(GRAPH[m]):
            if state.get(n) == "open":
                circles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)
    # A package's __init__ importing its own modules is how a package exports them, not a circle.
    circles = [c for c in circles if not any(b.startswith(a + ".") for a, b in zip(c, c[1:]))]
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_arrows_between_concerns_are_the_documented_ones():
    real = {(folder(a), folder(b)) for a, bs in GRAPH.items() for b in bs if folder(a) != folder(b)}
    documented = documented_arrows()
    assert real == documented, (
        f"docs/architecture.md and the imports differ.\nin the code, not the doc: {sorted(real - documented)}"
        f"\nin the doc, not the code: {sorted(documented - real)}")
    # The layering the doc states: the runtime knows no lesson and no course tooling; the
    # witness knows neither the runtime nor the lessons; the lessons know no grading.
    assert not {("runtime", "lessons"), ("runtime", "grading (tooling)"), ("grading (witness)", "runtime"),
                ("grading (witness)", "lessons"), ("lessons", "grading (witness)"),
                ("lessons", "grading (tooling)")} & real


def test_long_functions_say_why():
    unexplained = []
    for name, path in MODULES.items():
        if path.suffix != ".py":
            continue
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                head = lines[max(0, node.lineno - 6):node.lineno]
                if length > LONG and not any(line.strip().startswith("# Long:") for line in head):
                    unexplained.append(f"{name}.{node.name} ({length} lines)")
    assert not unexplained, f"functions over {LONG} lines without a '# Long:' reason: {unexplained}"


def test_the_repository_uses_only_the_new_names():
    from nanoparallel._old_names import MOVED
    # Every new name starts with runtime., grading. or lessons., none of which is an old name.
    old = re.compile(r"\bnanoparallel\.(" + "|".join(map(re.escape, sorted(MOVED, key=len, reverse=True))) + r")\b")
    from_import = re.compile(r"from nanoparallel import ([^\n\"]+)")
    files = subprocess.run(["git", "ls-files", "*.py", "*.ipynb", "*.md", "Makefile"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    found = []
    for f in files:
        if f in ("nanoparallel/_old_names.py", "tests/test_layout.py", "docs/architecture.md"):  # they name the old names
            continue
        text = (ROOT / f).read_text()
        found += [f"{f}: nanoparallel.{m.group(1)}" for m in old.finditer(text)]
        for m in from_import.finditer(text):
            names = {n.strip(" ()\\n,") for n in m.group(1).split(",")}
            found += [f"{f}: from nanoparallel import {n}" for n in names & set(MOVED)]
    assert not found, "old module names (see nanoparallel/_old_names.py):\n" + "\n".join(found)


def test_an_old_name_is_the_same_module_and_says_where_it_went():
    code = ("import warnings, sys\n"
            "warnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    import nanoparallel.models as old\n"
            "    from nanoparallel.viz.ring import ring_stepper\n"
            "from nanoparallel.lessons import models\n"
            "from nanoparallel.lessons.viz import ring\n"
            "assert old is models and ring_stepper is ring.ring_stepper\n"
            "assert models.__spec__.name == 'nanoparallel.lessons.models'\n"
            "print('\\n'.join(str(w.message) for w in caught))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "nanoparallel.models is now nanoparallel.lessons.models" in done.stdout
    assert "nanoparallel.viz.ring is now nanoparallel.lessons.viz.ring" in done.stdout
    # torchrun's users type `-m nanoparallel.launch`: it still starts the launcher.
    done = subprocess.run([sys.executable, "-m", "nanoparallel.launch", "--help"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr


@pytest.mark.parametrize("name", ["Cluster", "RunResult", "region", "ClusterError", "DeadlockError",
                                  "RankError", "Trace", "TraceEvent"])
def test_the_public_names_students_type(name):
    import nanoparallel
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(nanoparallel, name) is not None


def test_the_readme_is_short_and_every_link_in_it_and_docs_resolves():
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) < 200, "the README is for a first screen: move detail to docs/"
    broken = []
    for page in [readme, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if target.startswith(("http://", "https://", "#", "mailto:")):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "links that resolve to nothing:\n" + "\n".join(broken)


def test_the_grader_imports_the_witness_without_torch_and_torchrun_ranks_still_find_their_cluster():
    """The package's public names load on first use, so the grader (grade.py, its workers) pays for
    no torch; on torchrun's ranks the package still imports TorchrunCluster, which Cluster.from_env
    returns, however the engine is imported."""
    grader = ("import sys; sys.path.insert(0, 'autograder'); import guarded_execute; "
              "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", grader], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and done.stdout.split()[-1] == "False", done.stdout + done.stderr
    rank = ("from nanoparallel.runtime.cluster import Cluster; "
            "print(Cluster.on_torchrun_ranks.__name__)")
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    done = subprocess.run([sys.executable, "-c", rank], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.split()[-1] == "TorchrunCluster", done.stdout + done.stderr
