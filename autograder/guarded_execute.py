"""nbgrader's Execute step, with a witness in the kernel that the submission cannot talk past,
in a sandbox per submission (sandbox.py).

`GuardedExecute` replaces nbgrader's `Execute` in `Autograde`, and `WitnessedScores` its
`SaveAutoGrades` (see nbgrader_config.py). For each submission it:

1. writes a plan for the kernel's guard (`nanoparallel.grading.guard`) into a private file: a fresh random
   key, the writing end of a pipe for its records, a nonce per locked and graded cell, each graded
   cell's exact code, the names the submission's solution cells define (the only names it may
   bind), the digests of the course's own code; which cell is which comes from the instructor's
   notebook in solutions/, never from the submission's metadata;
2. wraps each graded cell in one `if` block that tells the guard where it starts and, on its last
   line, that it reached its end, and marks each locked cell's start and end. The kernel is sent
   only a request that the guard run graded cell N (`graded_run_request`): the checks' text stays out of
   everything notebook code can read while they run. Then it starts the kernel in
   the sandbox (reached over ipc sockets), in an empty working folder, with the guard loaded as an
   IPython extension (it reads and deletes the plan before any cell) and the ranks in guarded mode
   (`NANOPARALLEL_GUARDED=1`);
3. after the run, puts the cells' own source back and reads the guard's records from the pipe,
   keeping only those whose MAC verifies. A graded cell scores its points if and only if it has a
   valid "ok" record (`WitnessedScores`); one without gets an `IntegrityError` output that says
   why in the feedback. The verdict per cell goes to `integrity/<student>/<assignment>/<notebook>.json`
   under the course folder, which `grade.py` prints and adds to grades.csv.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import hmac
import json
import os
import secrets
import tempfile
import textwrap
import threading
import time
from queue import Empty

import nbformat
from nbformat.notebooknode import NotebookNode
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbgrader import utils as nbgrader_utils
from nbgrader.preprocessors import Execute, SaveAutoGrades
from traitlets import Any, Bool, List, Type

from kernel_sockets import AsyncIpcKernelManager
from nanoparallel.runtime.cluster import environment
from nanoparallel.grading.guard import ENV as GUARD_ENV, GATE_CLOSED, GRADED_FUNCTION
from nanoparallel.grading.provenance import code_digest, nested_codes
from nanoparallel.grading.rank_guard import ENV as RANKS_ENV

FUTURE_ANNOTATIONS = 0x1000000  # __future__.annotations.compiler_flag


def _transform(source: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager
    return TransformerManager().transform_cell(source)


def bound_names(source: str) -> set[str]:
    """Names a cell binds at top level (assignments, definitions, imports, loops, with-as)."""
    try:
        tree = ast.parse(_transform(source))
    except SyntaxError:
        return set()
    names: set[str] = set()

    def targets(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    names.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor,
                                   ast.With, ast.AsyncWith, ast.NamedExpr)):
                targets(node)
            elif isinstance(node, ast.Expr):
                targets(node)  # walrus
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    visit(inner)
    visit(tree.body)
    return names


def _digests(source: str) -> set[str]:
    """Digests of every code object a cell's source compiles to, the way IPython compiles it: one
    top-level statement at a time (the bytecode of `module.f()` depends on whether the same unit
    imported `module`), with or without `from __future__ import annotations` in effect."""
    found = set()
    for node in ast.parse(source).body:
        for flags in (0, FUTURE_ANNOTATIONS):
            code = compile(ast.Module([node], []), "<cell>", "exec", flags=flags, dont_inherit=True)
            found.update(code_digest(c) for c in nested_codes(code))
    return found


def wrap_graded(source: str, nonce: str) -> str:
    """The cell inside one `if` block whose first and last lines tell the guard where it starts and
    that it reached its end. Its checks run as the body of a function that is called at once and
    never bound to a name, so that what they bind while they run (a loop's expected value) is a
    local variable, out of reach of the functions they call except through frames, which the guard
    watches. When the checks end, the names their visible part binds reach the notebook, as a
    cell's would; what only the hidden tests bind does not (`exported_names`). When they fail, the
    guard copies the same names (a `finally` here would make tracebacks point at itself)."""
    text = _transform(source).rstrip("\n") or "pass"
    declared = sorted({name for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Global)
                       for name in node.names})
    body = textwrap.indent(text, " " * 8)
    lines = [f'if __import__("sys").audit("nanoparallel.graded_begin", "{nonce}") is None:',
             "    @lambda checks: checks()",
             f"    def {GRADED_FUNCTION}():",
             *([f"        global {', '.join(declared)}"] if declared else []),
             body,
             f"        globals().update((k, v) for k, v in locals().items() if k in {sorted(exported_names(source))!r})",
             f'    __import__("sys").audit("nanoparallel.graded_end", "{nonce}")', ""]
    return "\n".join(lines)


def exported_names(source: str) -> set[str]:
    """The names a graded cell leaves in the notebook: those its visible checks bind and its hidden
    tests do not. What the hidden tests bind (a reference implementation, a helper, the last
    expected value of a loop they share with the visible checks) stays inside the checks, out of
    reach of the answers that run after them."""
    hidden, inside = set(), False
    for number, line in enumerate(source.splitlines(), start=1):
        inside = inside or HIDDEN_BEGIN in line
        if inside:
            hidden.add(number)
        inside = inside and HIDDEN_END not in line
    try:
        tree = ast.parse(_transform(source))
    except SyntaxError:
        return set()
    bound_in_hidden = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) not in hidden:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound_in_hidden.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound_in_hidden.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound_in_hidden.update((a.asname or a.name).split(".")[0] for a in node.names)
    return bound_names("".join(shown_lines(source))) - bound_in_hidden


def graded_run_request(nonce: str) -> str:
    """What the kernel is sent for a graded cell: a request that the guard hand over the cell's
    code, which it holds from the plan, and the call that runs it. The checks' text (hidden tests
    and their expected values) so never reaches the places code running during the cell could read
    it: IPython's input history (`In`, `_i`), linecache, the kernel's request message, IPython's
    events. The request runs the cell, not the guard's hook, so that none of the witness's frames
    sits below the cell's (nanoparallel/grading/guard.py, `prepare_graded`); it tells the guard when
    the cell raised, and binds what the guard hands back of the checks' visible names (outside the
    guard's hook: a value it replaces may run a `__del__`)."""
    return (f'try:\n'
            f'    [__import__("sys").audit("nanoparallel.graded_run", "{nonce}", box) or box.pop()() for box in [[]]]\n'
            f'except BaseException as __nanoparallel_failure:\n'
            f'    __nanoparallel_exports = []\n'
            f'    __import__("sys").audit("nanoparallel.graded_failed", "{nonce}", __nanoparallel_failure, __nanoparallel_exports)\n'
            f'    [globals().update(bound) for bound in __nanoparallel_exports]\n'
            f'    del __nanoparallel_exports\n'
            f'    raise\n')


HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def shown_lines(source: str) -> list[str]:
    """The lines of a graded cell's code a traceback may show: its hidden tests are blank lines."""
    lines, hidden = [], False
    for line in source.splitlines(keepends=True):
        if HIDDEN_BEGIN in line:
            hidden = True
        lines.append("\n" if hidden else line)
        if HIDDEN_END in line:
            hidden = False
    return lines


def wrap_locked(source: str, nonce: str) -> str:
    """Start and end markers; the end goes before a final expression so that it still displays."""
    text = _transform(source).rstrip("\n")
    begin = f'__import__("sys").audit("nanoparallel.locked", "{nonce}")'
    end = f'__import__("sys").audit("nanoparallel.locked_end", "{nonce}")'
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return begin + "\n" + text
    lines = text.split("\n")
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        at = tree.body[-1].lineno - 1
        lines = lines[:at] + [end] + lines[at:]
    else:
        lines.append(end)
    return "\n".join([begin, *lines])


def cell_kind(cell) -> str | None:
    """A code cell's kind by its nbgrader metadata: "solution", "graded", "locked", or None."""
    meta = cell.metadata.get("nbgrader", {})
    if cell.cell_type != "code":
        return None
    if meta.get("solution"):
        return "solution"
    if meta.get("grade"):
        return "graded"
    if meta.get("locked"):
        return "locked"
    return None


def kinds_of(source_nb) -> dict:
    """grade_id -> "solution", "graded" or "locked", from the instructor's notebook: the
    submission's own metadata says what the student wants it to say (nbgrader restores a locked
    cell's source, not every flag, and keeps the flags of a cell it does not know)."""
    return {cell.metadata["nbgrader"]["grade_id"]: cell_kind(cell) for cell in source_nb.cells
            if cell_kind(cell) and cell.metadata.get("nbgrader", {}).get("grade_id")}


def plan_for(nb, key: bytes, records_fd: int, source_nb) -> tuple[dict, dict]:
    """The guard's plan and, per cell index, (nonce, kind, the source the kernel is sent). Which cell is which
    comes from `source_nb`, the instructor's notebook, never from the submission; its unlocked
    demonstration cells add to the course's own code (a student may edit those cells; an edited
    one is not the course's any more)."""
    if source_nb is None:
        raise RuntimeError("the instructor's notebook (the source in solutions/) was not found: without it "
                           "the grader cannot tell the course's cells from the submission's")
    kinds = kinds_of(source_nb)
    cells, wrapped, trusted = {}, {}, set()
    defined_by_course, defined_by_submission = set(), set()
    for cell in source_nb.cells:
        kind = cell_kind(cell)
        if kind in (None, "locked") and cell.cell_type == "code":
            try:
                trusted |= _digests(_transform(cell.source))
            except SyntaxError:
                pass
        if kind in ("locked", "graded"):
            defined_by_course |= bound_names(cell.source)
    for index, cell in enumerate(nb.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        kind = kinds.get(grade_id) if cell.cell_type == "code" else None
        if kind == "solution":
            defined_by_submission |= bound_names(cell.source)
            continue
        if kind is None:
            continue
        nonce = secrets.token_hex(16)
        source = wrap_graded(cell.source, nonce) if kind == "graded" else wrap_locked(cell.source, nonce)
        try:
            trusted |= _digests(source)
        except SyntaxError:
            pass
        cells[nonce] = {"grade_id": grade_id, "kind": kind, "binds": sorted(bound_names(cell.source)),
                        "source": source}
        if kind == "graded":
            cells[nonce]["shown"] = shown_lines(source)
            cells[nonce]["exports"] = sorted(exported_names(cell.source))
        wrapped[index] = (nonce, kind, graded_run_request(nonce) if kind == "graded" else source)
    exempt = defined_by_submission - defined_by_course - set(dir(builtins))
    plan = {"key": key.hex(), "records_fd": records_fd, "cells": cells, "exempt": sorted(exempt),
            "trusted_code": sorted(trusted)}
    return plan, wrapped


class Records:
    """The guard's records, read from a pipe as the kernel writes them. A pipe, not a file: code in
    the sandbox can add lines (which need the key to count) but cannot take back one written."""

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        self.chunks: list[bytes] = []
        self.thread = threading.Thread(target=self._drain, daemon=True, name="guard-records")
        self.thread.start()

    def _drain(self) -> None:
        while chunk := os.read(self.read_fd, 65536):
            self.chunks.append(chunk)

    def close_writer(self) -> None:
        """Our copy of the writing end; the pipe ends when the kernel and its ranks are gone too."""
        os.close(self.write_fd)

    def text(self, wait: float = 10.0) -> str:
        self.thread.join(wait)  # a rank still dying may hold the writing end a moment longer
        return b"".join(self.chunks).decode("utf-8", "replace")

    def close(self) -> None:
        os.close(self.read_fd)


def read_records(text: str, key: bytes) -> list[dict]:
    """The entries whose MAC verifies, and a finding for each other whole line: only the guard
    writes to the pipe, and each of its records starts on a line of its own, so a line it did not
    write is the notebook's (bytes written without a newline, to glue onto the guard's next record
    and spoil its MAC, would otherwise hide that record and its flag). A last line cut short (a
    kernel killed as it wrote) counts for nothing either way."""
    entries = []
    *whole, _cut_short = text.split("\n")
    for line in whole:
        if not line:
            continue
        mac, _, body = line.partition(" ")
        want = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        if hmac.compare_digest(mac, want):
            entries.append(json.loads(body))
        elif line.startswith(GATE_CLOSED):
            # Written by the C gate as it closed, unsigned (a submission could write such a line
            # too, and would only flag itself).
            entries.append({"kind": "finding", "reason": line})
        else:
            entries.append({"kind": "finding", "reason": "the witness's records held a line it did not write"})
    return entries


def _integrity_error(reason: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename="IntegrityError", evalue=reason,
                        traceback=[f"\x1b[0;31mIntegrityError\x1b[0m: {reason}"])


def judge(nb, wrapped: dict, entries: list[dict]) -> dict:
    """Mark graded cells that have no valid 'ok' record; return the verdict for the instructor."""
    if not any(e.get("kind") == "installed" for e in entries):
        raise RuntimeError("the grader's guard did not start in the kernel: is nanoparallel installed "
                           "in the environment nbgrader runs?")
    probes = [e["reason"] for e in entries if e.get("kind") == "probe"]
    findings = [e["reason"] for e in entries if e.get("kind") == "finding"]
    graded = {}
    for e in entries:  # a cell run again (its source copied from In[]) cannot undo a "tampered"
        if e.get("kind") == "graded" and graded.get(e["nonce"], {}).get("status") != "tampered":
            graded[e["nonce"]] = e
    cells, reasons, witnessed = {}, list(probes) + findings, []
    for index, (nonce, kind, _) in wrapped.items():
        if kind != "graded":
            continue
        cell = nb.cells[index]
        grade_id = cell.metadata["nbgrader"].get("grade_id")
        failed = any(o.get("output_type") == "error" for o in cell.outputs)
        entry = graded.get(nonce)
        if entry and entry["status"] == "ok" and not failed:
            witnessed.append(grade_id)
            continue
        if entry and entry["status"] == "ok":
            # The witness writes "ok" only once the checks' last line has run: a cell that then
            # shows an error had its record written by something else.
            why = "the records say this cell's checks reached their last line, yet the cell raised"
            reasons.append(f"{grade_id}: {why}")
            cells[grade_id] = why
            cell.outputs.append(_integrity_error(f"this cell scores 0: {why}"))
            continue
        if any(o.get("output_type") == "execute_result" for o in cell.outputs):
            # The course's checks end in statements: a value shown by a graded cell that did not
            # pass is what nbgrader's partial-credit rule would have read as a score.
            reasons.append(f"{grade_id}: the cell showed a value (which nbgrader would read as a partial "
                           "score) without passing its checks")
        if entry:
            why = "; ".join(entry["findings"])
            reasons.append(f"{grade_id}: {why}")
            cells[grade_id] = why
            cell.outputs.append(_integrity_error(f"this cell scores 0: {why}"))
        elif probes:
            why = f"the grader's guard stopped witnessing this notebook ({probes[0]})"
            cells[grade_id] = why
            cell.outputs.append(_integrity_error(f"this cell scores 0: {why}"))
        elif not failed:
            why = ("this cell's checks never reported reaching their last line, yet the notebook shows "
                   "no error: something stopped them or hid their failure")
            reasons.append(f"{grade_id}: {why}")
            cells[grade_id] = why
            cell.outputs.append(_integrity_error(f"this cell scores 0: {why}"))
    if reasons:
        # Said at the top of the feedback too, where no grade depends on it (stdout, not an error).
        first = next(c for c in nb.cells if c.cell_type == "code")
        first.outputs.append(NotebookNode(output_type="stream", name="stdout", text=(
            "IntegrityError: the grader flagged this submission for the instructor:\n- "
            + "\n- ".join(reasons) + "\n")))
    return {"flagged": bool(reasons), "reasons": reasons, "cells": cells, "witnessed": witnessed}


POLL_SLICE = 1.0  # seconds: the longest a message that has arrived can go unnoticed


def poll_in_slices(client) -> None:
    """Make an asyncio kernel client wait for shell and iopub messages in slices of POLL_SLICE.

    pyzmq's asyncio poll can miss the wake-up for a message that has already arrived; the
    message is then found only when the poll times out, when pyzmq polls once more. nbclient
    waits for a cell's reply with the whole cell timeout, so a submission stood still for
    exactly 60 s between two cells in about one run in ten (measured on notebook 05); each
    slice ends with that extra poll instead."""
    for channel in (client.shell_channel, client.iopub_channel):
        channel.get_msg = _sliced(channel.get_msg)


def _sliced(get_msg):
    async def sliced(timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await get_msg(timeout=min(POLL_SLICE, left))
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
    return sliced


class PollsInSlices:
    """Mixed into an nbclient `NotebookClient`: its kernel client polls in slices."""

    async def async_start_new_kernel_client(self):
        client = await super().async_start_new_kernel_client()
        poll_in_slices(client)
        return client

    # nbconvert's ExecutePreprocessor calls the synchronous wrapper, which nbclient made of its own
    # coroutine: wrap ours, or the override is never called.
    start_new_kernel_client = run_sync(async_start_new_kernel_client)


class SandboxedKernelManager(AsyncIpcKernelManager):
    """A kernel started inside `sandbox` (autograder/sandbox.py), reached over ipc sockets in the
    sandbox's socket folder (TCP does not cross its network namespace); without a sandbox, a plain
    kernel, over ipc sockets all the same (kernel_sockets.py)."""

    sandbox = Any(None)

    def __init__(self, sandbox=None, **kwargs):
        if sandbox is not None:
            kwargs["socket_folder"] = sandbox.sockets
        super().__init__(sandbox=sandbox, **kwargs)

    def format_kernel_cmd(self, extra_arguments=None):
        argv = super().format_kernel_cmd(extra_arguments)
        return argv if self.sandbox is None else self.sandbox.command(argv, dict(os.environ))


class SlicedNotebookClient(PollsInSlices, NotebookClient):
    """nbclient, polling as the grader does, for what runs a notebook outside nbgrader (the
    mutation runs, the cell benchmark): a lost wake-up would hold a cell for its whole timeout.
    Its kernel is reached over ipc sockets, as the grader's are: these runs share the machine
    with other notebooks' ranks."""

    kernel_manager_class = Type(SandboxedKernelManager)


class GuardedExecute(PollsInSlices, Execute):
    """Execute, witnessed and sandboxed: see the module docstring."""

    extra_arguments = List(["--HistoryManager.hist_file=:memory:",
                            "--IPKernelApp.extra_extensions=nanoparallel.grading.guard"]).tag(config=True)
    sandbox = Bool(True, help="Run each submission's kernel and ranks in a sandbox (sandbox.py). "
                              "Off only by the instructor's explicit opt-out (grade.py --no-sandbox).").tag(config=True)

    def preprocess(self, nb, resources):
        from sandbox import Sandbox, check
        key = secrets.token_bytes(32)
        originals = [cell.source for cell in nb.cells]
        records = Records()
        with tempfile.TemporaryDirectory(prefix="nanoparallel-grading-") as private:
            os.chmod(private, 0o700)
            self._sandbox = Sandbox(private, check()) if self.sandbox else None
            self._records_fd = records.write_fd
            # The kernel starts in an empty folder, never next to the submitted files.
            self._scratch = self._sandbox.scratch if self._sandbox else os.path.join(private, "scratch")
            os.makedirs(self._scratch, exist_ok=True)
            plan, wrapped = plan_for(nb, key, records.write_fd, self._source_notebook(resources))
            witness = self._sandbox.witness if self._sandbox else private
            plan_path = os.path.join(witness, "plan.json")
            with open(os.open(plan_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                json.dump(plan, f)
            for index, (_, _, source) in wrapped.items():
                nb.cells[index].source = source
            try:
                # Nothing in the kernel's environment says that nbgrader runs it.
                with environment({GUARD_ENV: plan_path, RANKS_ENV: "1", "PYTHONSAFEPATH": "1",
                                  "NBGRADER_EXECUTION": ""}):
                    os.environ.pop("NBGRADER_EXECUTION")
                    nb, resources = super().preprocess(nb, resources)
            finally:
                for cell, source in zip(nb.cells, originals):
                    cell.source = source
                records.close_writer()
                if self._sandbox is not None:
                    self._sandbox.close()
            text = records.text()
            records.close()
            verdict = judge(nb, wrapped, read_records(text, key))
        verdict["sandbox"] = "bubblewrap" if self.sandbox else "none (--no-sandbox)"
        resources["nanoparallel_witnessed"] = set(verdict["witnessed"])
        self._save_verdict(resources, verdict)
        return nb, resources

    def create_kernel_manager(self):
        name = self.kernel_name or self.nb.metadata.get("kernelspec", {}).get("name") or "python3"
        self.km = SandboxedKernelManager(kernel_name=name, config=self.config, sandbox=self._sandbox)
        return self.km

    async def async_start_new_kernel(self, **kwargs):
        # The guard's end of the records pipe, and the empty working folder.
        kwargs["pass_fds"] = (self._records_fd,)
        kwargs["cwd"] = self._scratch
        return await super().async_start_new_kernel(**kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)

    def _source_notebook(self, resources):
        from nbgrader.coursedir import CourseDirectory
        info = resources.get("nbgrader", {})
        try:
            course = CourseDirectory(config=self.config)
            path = os.path.join(course.format_path(course.source_directory, ".", info["assignment"]),
                                f"{info['notebook']}.ipynb")
            return nbformat.read(path, as_version=4)
        except (KeyError, OSError, ValueError):
            return None

    def _save_verdict(self, resources, verdict: dict) -> None:
        info = resources.get("nbgrader", {})
        student, assignment = info.get("student", "unknown"), info.get("assignment", "unknown")
        notebook = info.get("notebook", "notebook")
        from nbgrader.coursedir import CourseDirectory
        folder = os.path.join(CourseDirectory(config=self.config).root, "integrity", student, assignment)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{notebook}.json"), "w") as f:
            json.dump(verdict, f, indent=1)


class WitnessedScores(SaveAutoGrades):
    """nbgrader's SaveAutoGrades, with one rule for an autograded cell: full points if the guard
    witnessed its code run to its end unchanged (GuardedExecute's verdict), else 0. What the cell
    shows (an error, stderr, a number nbgrader would read as partial credit) decides nothing."""

    def _add_score(self, cell, resources):
        witnessed = resources.get("nanoparallel_witnessed")
        if witnessed is None:
            raise RuntimeError("no witness verdict for this notebook: GuardedExecute must run before WitnessedScores")
        if nbgrader_utils.is_solution(cell) or cell.cell_type != "code":
            return super()._add_score(cell, resources)  # written answers: graded by hand
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                          self.assignment_id, self.student_id)
        points = float(cell.metadata["nbgrader"]["points"])
        grade.auto_score = points if cell.metadata["nbgrader"]["grade_id"] in witnessed else 0.0
        grade.needs_manual_grade = grade.manual_score is not None
        self.gradebook.db.commit()
