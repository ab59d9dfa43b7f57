"""The course as students meet it: JupyterLab in a real browser (Debian's chromium, driven by
Playwright), nbgrader's extension and the widgets, end to end.

- every notebook in course/, solved as a student solves it (the solution's answers in its answer
  cells, the release's visible checks in its test cells), opens: its cells render, its kernel
  starts, nothing shows an error and nbgrader's Validate button is in the toolbar; then it runs
  cell by cell in the page (Shift+Enter, as a learner does): no cell shows an error or hangs,
  every widget view renders as a widget (not as an error or its plain-text fallback), and
  moving its controls changes its figure. (The hidden tests run where they are graded:
  tests/test_course.py and tests/test_nbval.py.)
- a kernel shut down from the Kernel menu leaves no worker process behind;
- `make lab` listens on 127.0.0.1 only, refuses requests without its token and keeps the
  XSRF check on;
- and the checks themselves fire on a scratch notebook of known-bad cells (stderr, a
  traceback, a widget without its front end, a hung cell), so that a JupyterLab upgrade that
  renames a CSS class cannot turn them into checks that see nothing.

The test's own JupyterLab runs from this environment on a free localhost port with a random
token, serves a temporary copy of course/ and the solved notebooks (nothing is saved into the repository)
and is shut down with its kernels at the end; a process left behind fails the module.

Notebooks are globbed when the tests are collected, so a new notebook is tested as soon as it
lands. Screenshots of each widget go to artifacts/browser/; a widget that has no committed
screenshot in tests/browser/screenshots/ (used by the README's course map) gets one, and
NANOPARALLEL_UPDATE_SCREENSHOTS=1 refreshes them all.

Without a chromium the browser tests skip and say why (CI installs it from Debian packages).
"""
from __future__ import annotations

import contextlib
import http.cookiejar
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

from browser_support import (ARTIFACTS, CHROMIUM_ARGS, ROOT, SCREENSHOTS, WIDGET_MIME, Lab,
                             NotebookPage, descendants, describe, find_chromium,
                             http_status, jupyter_env, kill_tree, listen_addresses,
                             no_browser_reason, poll, tail, wait_gone, wait_http)
from ports import free_port

pytestmark = pytest.mark.browser

COURSE = sorted(ROOT.glob("course/[0-9]*/*.ipynb"))
UPDATE_SCREENSHOTS = os.environ.get("NANOPARALLEL_UPDATE_SCREENSHOTS") == "1"
CELL_TIMEOUT = 120.0  # seconds; nbval's cell timeout in pyproject is the same
SHUTDOWN_GRACE = 10.0  # seconds for the kernel and its workers to go after Shut Down Kernel


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def nbval_marks(cell) -> set[str]:
    """nbval's per-cell markers (tags or comments): `skip` and `raises` are honoured here."""
    tags = set(cell.get("metadata", {}).get("tags", []))
    marks = {"skip"} if "nbval-skip" in tags or "NBVAL_SKIP" in cell.source else set()
    if "raises-exception" in tags or "NBVAL_RAISES_EXCEPTION" in cell.source:
        marks.add("raises")
    return marks


# -- fixtures -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chromium() -> str:
    reason = no_browser_reason()
    if reason:
        print(f"\ntests/test_browser.py: SKIPPED, {reason}", file=sys.__stderr__, flush=True)
        pytest.skip(reason)
    return find_chromium()


@pytest.fixture(scope="module")
def lab(chromium, tmp_path_factory):
    server = Lab(tmp_path_factory.mktemp("lab"))
    try:
        server.start()
    except Exception:
        server.stop()
        raise
    yield server
    leftovers = server.stop()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(server.log, ARTIFACTS / "jupyter.log")
    assert not leftovers, "processes outlived the server's clean shutdown:\n" + "\n".join(leftovers)


@pytest.fixture(scope="module")
def browser(chromium):
    from playwright.sync_api import sync_playwright  # the dev extra installs it
    with sync_playwright() as p:
        # Playwright gives every launch a fresh profile (user-data-dir) of its own.
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.js_errors = []
    page.on("pageerror", lambda exc: page.js_errors.append(str(exc)))
    yield page
    context.close()


@contextlib.contextmanager
def evidence(page, name: str):
    """On failure, keep a screenshot of the page (the server's log is kept at the end)."""
    folder = ARTIFACTS / name
    try:
        yield folder
    except BaseException:
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(Exception):
            page.screenshot(path=str(folder / "failure.png"), full_page=False)
        print(f"\nbrowser evidence: {relative(folder)}/failure.png", file=sys.stderr)
        raise


def fresh_folder(name: str) -> Path:
    folder = ARTIFACTS / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


# -- the checks themselves ------------------------------------------------------------------

def test_the_checks_see_what_a_student_would_see(lab, page):
    """Known-bad cells in a scratch notebook, with the widget front end switched off: every
    check must fire. Otherwise a JupyterLab upgrade that renames a CSS class could make the
    browser tests pass by seeing nothing."""
    from nbformat.v4 import new_code_cell, new_notebook
    nb = new_notebook(cells=[
        new_code_cell("import sys, time, ipywidgets\nprint('a warning', file=sys.stderr)"),
        new_code_cell("1 / 0"),
        new_code_cell("ipywidgets.VBox([ipywidgets.IntSlider(), ipywidgets.Output()])"),
        new_code_cell("time.sleep(60)"),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    (lab.root / "scratch").mkdir(exist_ok=True)
    nbformat.write(nb, lab.root / "scratch" / "bad.ipynb")
    with evidence(page, "checks"), lab.extensions_disabled("@jupyter-widgets/jupyterlab-manager"):
        view = NotebookPage(page, lab, "scratch/bad.ipynb").open()
        for i in range(3):
            view.run_cell(i)
        assert any("a warning" in e for e in view.errors(0)), view.errors(0)
        assert any("ZeroDivisionError" in e for e in view.errors(1)), view.errors(1)
        assert any("plain text" in e for e in view.errors(2)), view.errors(2)
        assert view.widget_roots(2).count() == 0
        with pytest.raises(AssertionError, match="still running"):
            view.run_cell(3, timeout=3)
    lab.shutdown_kernels()


# -- course/, solved as a student solves it: opened, then every cell run, every widget moved ---

def solved_by_a_student(notebook: Path):
    """course/'s notebook with the solution's answer in each answer cell (its BEGIN/END SOLUTION
    marker lines dropped): what a student who solved it has open. Its test cells are the release's,
    visible checks only, so the page runs what a student runs and not the hidden tests."""
    solution = nbformat.read(ROOT / "solutions" / notebook.parent.name / notebook.name, as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells
               if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = "\n".join(line for line in answers.pop(grade_id).splitlines()
                                    if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    assert not answers, f"solutions/ has answer cells that course/ lacks: {sorted(answers)} (run `make release`)"
    return nb


def save_screenshot(root, notebook: str, k: int, folder: Path, moved: bool = False) -> Path:
    """The widget as first drawn (also the README's picture) or after its controls moved."""
    shot = folder / f"{notebook}_{k}{'_moved' if moved else ''}.png"
    page = root.page
    viewport = page.viewport_size
    height = root.bounding_box()["height"]
    if height > viewport["height"] - 250:  # JupyterLab does not scroll the page: make room
        page.set_viewport_size({"width": viewport["width"], "height": int(height) + 300})
    try:
        root.scroll_into_view_if_needed()
        root.screenshot(path=str(shot))
    finally:
        page.set_viewport_size(viewport)
    committed = SCREENSHOTS / shot.name
    if not moved and (UPDATE_SCREENSHOTS or not committed.exists()):
        committed.parent.mkdir(parents=True, exist_ok=True)
        small_png(shot, committed)
    return shot


def small_png(src: Path, dest: Path) -> None:
    """A 256-colour copy (half the bytes; screenshots of flat plots lose nothing visible)."""
    from PIL import Image  # matplotlib's own dependency
    with Image.open(src) as image:
        image.convert("RGB").quantize(colors=256).save(dest, format="PNG", optimize=True)


def check_opened(view, nb, page) -> None:
    """As opened: every cell on the page, the markdown rendered, no error shown, Validate there."""
    assert view.count() == len(nb.cells), "not every cell of the notebook is on the page"
    markdown = sum(1 for c in nb.cells if c.cell_type == "markdown" and c.source.strip())
    rendered = view.panel.locator(".jp-MarkdownCell .jp-RenderedMarkdown")
    assert rendered.count() >= markdown, "some markdown cells did not render"
    problems = {i: e for i in range(view.count()) if view.kind(i) == "code" and (e := view.errors(i))}
    assert not problems, f"cells show errors when the notebook is opened: {problems}"
    button = view.panel.locator(".jp-Toolbar .validate-button")
    button.wait_for(state="visible", timeout=30_000)
    assert button.inner_text().strip() == "Validate"
    assert button.locator("jp-button[disabled], button[disabled]").count() == 0, "Validate is disabled"
    assert not page.js_errors, f"JavaScript errors in the page: {page.js_errors}"


@pytest.mark.parametrize("notebook", COURSE, ids=lambda p: p.parent.name)
def test_course_notebook_opens_then_runs_cell_by_cell_with_live_widgets(lab, page, notebook):
    name = notebook.parent.name
    folder = fresh_folder(name)
    report = {"notebook": relative(notebook), "cells": [], "widgets": []}
    nb = solved_by_a_student(notebook)
    where = Path("solved") / name / notebook.name
    (lab.root / where).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, lab.root / where)
    with evidence(page, name):
        view = NotebookPage(page, lab, where.as_posix()).open()
        check_opened(view, nb, page)
        page.screenshot(path=str(folder / "notebook.png"))
        t0 = time.monotonic()
        widgets_in_page = {}
        for i, cell in enumerate(nb.cells):
            marks = nbval_marks(cell)
            if "skip" in marks:
                continue
            seconds = view.run_cell(i, timeout=CELL_TIMEOUT)
            if cell.cell_type != "code":
                continue
            report["cells"].append({"cell": i, "seconds": round(seconds, 2)})
            errors = view.errors(i)
            assert "raises" in marks or not errors, (
                f"cell {i} shows an error:\n{view.source(i)[:300]}\n---\n" + "\n".join(errors))
            roots = view.widget_roots(i)
            widgets_in_page[i] = roots.count()
            # Exercise each widget now: later cells may change what it runs (cluster.close()).
            for w in range(roots.count()):
                k = len(report["widgets"]) + 1
                root = roots.nth(w)
                outcome = view.exercise_widget(
                    root, on_first_figure=lambda: save_screenshot(root, name, k, folder))
                outcome.update(cell=i, widget=k, source=view.source(i)[:200])
                report["widgets"].append(outcome)
                save_screenshot(root, name, k, folder, moved=True)
                assert outcome["initial"], f"widget {k} (cell {i}) never shows a figure"
                assert outcome["controls"], f"widget {k} (cell {i}) has no control the test can move"
                assert any(c["changed"] for c in outcome["controls"]), (
                    f"widget {k} (cell {i}): no control changed its figure: {outcome['controls']}")
                errors = view.errors(i)
                assert not errors, (f"widget {k} (cell {i}) shows an error after moving its controls:\n"
                                    + "\n".join(errors))
        report["seconds"] = round(time.monotonic() - t0, 1)
        # Every widget view the kernel sent (as saved in the notebook) is a widget on the page.
        # Saved twice at most: an autosave that finishes just after Ctrl+S is pressed moves the
        # file's modification time first, and what it wrote may predate the last outputs.
        for attempt in range(2):
            saved = view.save()
            sent = {i: sum(1 for o in cell.get("outputs", []) if WIDGET_MIME in o.get("data", {}))
                    for i, cell in enumerate(saved["cells"][:view.count()])}
            differ = {i: (n, widgets_in_page.get(i, 0)) for i, n in sent.items() if n != widgets_in_page.get(i, 0)}
            if not differ:
                break
        assert not differ, "cells whose widgets (the kernel displayed, the page renders) differ: " + ", ".join(
            f"cell {i}: {n} vs {shown}" for i, (n, shown) in differ.items())
        page.screenshot(path=str(folder / "notebook-end.png"))
        (folder / "report.json").write_text(json.dumps(report, indent=1))
        assert not page.js_errors, f"JavaScript errors in the page: {page.js_errors}"
    print(f"\n{name}: {len(report['cells'])} code cells in {report['seconds']} s, "
          f"{len(report['widgets'])} widget(s): "
          + "; ".join(f"#{w['widget']} " + ", ".join(f"{c['kind']} {c['label']!r} "
                                                     f"{'redraws' if c['changed'] else 'SAME FIGURE'}"
                                                     for c in w["controls"]) for w in report["widgets"]))
    lab.shutdown_kernels()


# -- a kernel shut down from the UI takes its workers with it -------------------------------

def first_cluster_notebook() -> tuple[Path, int] | None:
    for path in COURSE:
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and re.search(r"\bCluster\(", cell.source):
                return path, i
    return None


def test_kernel_shut_down_from_the_menu_leaves_no_workers(lab, page):
    found = first_cluster_notebook()
    if found is None:
        pytest.skip("no course notebook starts a Cluster")
    notebook, cluster_cell = found
    with evidence(page, "kernel-shutdown"):
        view = NotebookPage(page, lab, relative(notebook)).open()
        # A student ran the notebook from the top to its cluster (blank exercises raise: fine).
        for i in range(cluster_cell + 1):
            view.run_cell(i, timeout=CELL_TIMEOUT)
        # ... then typed a cell of their own.
        view.select(cluster_cell)
        page.keyboard.press("b")
        mine = cluster_cell + 1
        poll("the new cell", lambda: view.is_active(mine) and view.prompt(mine) in ("[ ]:", "[ ]", ""), 10)
        page.keyboard.press("Enter")
        page.keyboard.type('import os; print("PIDS", os.getpid(), *cluster.pids)')
        page.keyboard.press("Escape")
        view.run_cell(mine, timeout=CELL_TIMEOUT)
        text = view.cells.nth(mine).locator(".jp-OutputArea-output").first.inner_text()
        pids = [int(p) for p in re.search(r"PIDS ([\d ]+)", text).group(1).split()]
        kernel, workers = pids[0], pids[1:]
        assert len(workers) >= 2, f"expected the cluster's worker pids, got {text!r}"
        tree = [kernel] + descendants(kernel)
        assert set(workers) <= set(tree), "the workers are not children of the kernel"
        t0 = time.monotonic()
        view.shut_down_kernel_from_menu()
        left = wait_gone(tree, SHUTDOWN_GRACE)
        gone_after = time.monotonic() - t0
        assert not left, (f"{SHUTDOWN_GRACE:.0f} s after Kernel > Shut Down Kernel these are still running:\n"
                          + "\n".join(describe(p) for p in left))
        poll("the server to forget the kernel", lambda: view.session() is None or view.kernel() is None, 10)
    print(f"\nkernel {kernel} and {len(tree) - 1} child process(es) (workers {workers}) "
          f"gone {gone_after:.1f} s after Shut Down Kernel")


# -- `make lab`: localhost only, token required ---------------------------------------------

def test_make_lab_listens_on_localhost_and_requires_its_token(tmp_path):
    """Starts the real `make lab` (its setup step is taken as done: this test runs inside that
    environment) and checks what a neighbour on the network or another local user could do."""
    if shutil.which("make") is None:
        pytest.fail("`make` is not installed; `make lab` is how students start the course")
    prefix = Path(sys.prefix)
    port = free_port()
    log = tmp_path / "make-lab.log"
    cmd = ["make", "--no-print-directory", "-o", f"{prefix}/.installed", "lab", f"VENV={prefix}",
           f"LAB_ARGS=--no-browser --ServerApp.port={port} --ServerApp.port_retries=0"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=jupyter_env(tmp_path / "home"), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def started():
            if proc.poll() is not None:
                raise AssertionError(f"`make lab` exited with {proc.returncode}:\n{tail(log)}")
            m = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=([0-9a-f]+)",
                          log.read_text(errors="replace"))
            return m.group(1) if m else None
        token = poll("`make lab` to print its URL with a token", started, 120)
        url = f"http://127.0.0.1:{port}/api/contents"
        wait_http(url, token, proc, log, 30)
        assert len(token) >= 32, "the token is too short to be a secret"
        assert http_status(url) == 403, "a request without the token was not refused"
        assert http_status(url, "not-the-token") == 403, "a request with a wrong token was not refused"
        assert http_status(f"{url}?token=") == 403, "an empty token was accepted"
        assert http_status(url, token) == 200
        assert http_status(f"{url}?token={token}") == 200
        # A browser logged in by cookie still needs the XSRF token to change anything. (The
        # folder does not exist: with the check off this would be a harmless 404.)
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        opener.open(f"http://127.0.0.1:{port}/lab?token={token}", timeout=30).read()
        assert opener.open(url, timeout=10).status == 200, "the login cookie does not authenticate"
        forged = urllib.request.Request(f"{url}/no-such-folder-{port}", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            opener.open(forged, timeout=10)
        assert refused.value.code == 403, f"a POST without the XSRF token got {refused.value.code}, not 403"
        assert listen_addresses(port) == {"127.0.0.1"}, (
            f"`make lab` listens on {listen_addresses(port)}, not on 127.0.0.1 only")
    finally:
        left = kill_tree(proc)
    assert not left, f"`make lab` left processes behind: {left}"
