"""How a graded cell reaches the kernel (autograder/guarded_execute.py): as one line asking the
guard to run it, and, when run, as the body of a function whose values are no global.

The whole path, with the guard in a kernel, is tested by tests/test_tampering.py (tampering cases
`read_the_cells_text` and `read_the_checks_globals`)."""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "autograder"))
from guarded_execute import graded_run_request, plan_for, shown_lines, wrap_graded  # noqa: E402

CHECKS = '''"""Checks f."""
for x, want in ((1, 2), (2, 4)):
    assert f(x) == want, f"f({x}) = {f(x)}, expected {want}"
### BEGIN HIDDEN TESTS
for x, want in ((10, 20), (-3, -6)):
    assert f(x) == want
### END HIDDEN TESTS
'''


def _notebook():
    def cell(source, **meta):
        c = nbformat.v4.new_code_cell(source)
        c.metadata["nbgrader"] = meta
        return c
    return nbformat.v4.new_notebook(cells=[
        cell("import math", locked=True, grade_id="setup"),
        cell("def f(x):\n    return 2 * x", solution=True, grade_id="f"),
        cell(CHECKS, grade=True, points=1, grade_id="f_tests"),
    ])


def test_the_kernel_is_sent_no_text_of_the_checks():
    nb = _notebook()
    plan, sent = plan_for(nb, b"k" * 32, 3, nb)
    nonce, kind, source = sent[2]
    assert kind == "graded" and source == graded_run_request(nonce)
    assert "want" not in source and "(10, 20)" not in source
    assert "(10, 20)" in plan["cells"][nonce]["source"]  # the guard holds it


def test_a_traceback_shows_the_visible_checks_only():
    lines = shown_lines(wrap_graded(CHECKS, "n"))
    text = "".join(lines)
    assert "(1, 2)" in text and "(10, 20)" not in text and "HIDDEN" not in text
    assert len(lines) == len(wrap_graded(CHECKS, "n").splitlines())  # line numbers still match


def test_what_the_checks_bind_is_no_global_while_they_run_and_only_the_visible_part_s_after():
    seen = []
    ns = {"f": lambda x: seen.append(ns.get("want")) or 2 * x}
    source = CHECKS.replace('"""Checks f."""\n', '"""Checks f."""\ndef _shown(x):\n    return x\n').replace(
        "### BEGIN HIDDEN TESTS\n", "### BEGIN HIDDEN TESTS\nclass _Reference:\n    pass\n")
    exec(compile(wrap_graded(source, "n"), "graded-cell.py", "exec"), ns)
    assert seen and set(seen) == {None}, f"the answer saw the checks' expected values: {seen}"
    assert "_shown" in ns  # bound by the visible checks only: reaches the notebook, as a cell's would
    # Bound by the hidden tests (a reference, a loop's last expected value): stays inside the checks,
    # out of reach of the answers that run later.
    assert "_Reference" not in ns and "want" not in ns and "x" not in ns
    assert ns["_nanoparallel_graded_cell"] is None  # the function itself was never bound


def test_the_guard_copies_the_same_names_when_the_checks_fail():
    nb = _notebook()
    plan, _ = plan_for(nb, b"k" * 32, 3, nb)
    graded = next(cell for cell in plan["cells"].values() if cell["kind"] == "graded")
    assert graded["exports"] == []  # `x` and `want` are bound by the hidden tests too


def test_names_declared_global_by_the_checks_helpers_stay_global():
    source = "count = 0\ndef bump():\n    global count\n    count += 1\nbump()\nbump()\nassert count == 2\n"
    ns: dict = {}
    exec(compile(wrap_graded(source, "n"), "graded-cell.py", "exec"), ns)
    assert ns["count"] == 2


def test_a_line_the_guard_did_not_write_is_a_finding():
    import hashlib
    import hmac
    import json

    from guarded_execute import read_records
    key = b"k" * 32

    def line(entry):
        body = json.dumps(entry, sort_keys=True)
        return f"\n{hmac.new(key, body.encode(), hashlib.sha256).hexdigest()} {body}\n"
    ok = {"kind": "graded", "nonce": "n", "grade_id": "f_tests", "status": "ok", "findings": []}
    assert read_records(line({"kind": "installed"}) + line(ok), key) == [{"kind": "installed"}, ok]
    # Bytes the notebook wrote without a newline, to spoil the MAC of the guard's next record: that
    # record still stands on its own line, and the bytes are a finding.
    glued = read_records(line({"kind": "installed"}) + "#" + line({"kind": "probe", "reason": "gc"}), key)
    assert {"kind": "probe", "reason": "gc"} in glued and any(e["kind"] == "finding" for e in glued)
    # A record cut short as the kernel died counts for nothing, and flags nothing.
    assert read_records(line({"kind": "installed"}) + line(ok)[:30], key) == [{"kind": "installed"}]


def test_an_ok_record_for_a_cell_that_raised_scores_nothing_and_is_flagged():
    """The witness writes "ok" only once the checks' last line has run; a forged record for a
    cell that failed must not score it (and must say so), whatever wrote it."""
    from guarded_execute import judge
    nb = nbformat.v4.new_notebook()
    for failed in (False, True):
        cell = nbformat.v4.new_code_cell("pass", metadata={"nbgrader": {"grade_id": f"cell_{failed}", "grade": True}})
        if failed:
            cell.outputs = [nbformat.v4.new_output("error", ename="RankError", evalue="", traceback=[])]
        nb.cells.append(cell)
    wrapped = {0: ("n0", "graded", None), 1: ("n1", "graded", None)}
    entries = [{"kind": "installed"}] + [{"kind": "graded", "nonce": n, "grade_id": "x", "status": "ok", "findings": []}
                                         for n in ("n0", "n1")]
    verdict = judge(nb, wrapped, entries)
    assert verdict["witnessed"] == ["cell_False"]
    assert verdict["flagged"] and "cell_True" in verdict["cells"]
