"""Helpers for tests/test_browser.py: a throwaway JupyterLab server, Debian's chromium through
Playwright, and the few page operations the tests need (open a notebook, run its cells one by
one, find widget views, move their controls).

Nothing here sleeps for a fixed time to let the page settle: every wait polls a condition (a
prompt number, the kernel's status, an image's ``src``) with a deadline, and a timeout names
what it was waiting for.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ports import free_port

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the project's environment: jupyter comes from here too
ARTIFACTS = ROOT / "artifacts" / "browser"
SCREENSHOTS = ROOT / "tests" / "browser" / "screenshots"

# Debian's package is `chromium`; NANOPARALLEL_CHROMIUM points elsewhere if needed.
CHROMIUM_NAMES = ("chromium", "chromium-browser")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]

# What a widget view looks like when the front end cannot draw it.
WIDGET_ERROR_TEXTS = ("Error displaying widget", "Model not found", "Failed to load model class",
                      "Could not create a view", "Loading widget...")
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# A widget's repr when the widget view is missing: `VBox(children=(...))`.
WIDGET_REPR = re.compile(r"^\s*(VBox|HBox|Box|GridBox|Output|Tab|Accordion|interactive)\(children=")

# JupyterLab settings for the test server: every cell in the DOM (no windowing, so each
# output can be inspected without scrolling), no news or update checks, no autosave races.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


# -- processes ------------------------------------------------------------------------------

def children_map() -> dict[int, list[int]]:
    """{ppid: [pid, ...]} for every process in /proc."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def descendants(pid: int) -> list[int]:
    kids, out, todo = children_map(), [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids, timeout: float) -> list[int]:
    """Poll until none of ``pids`` is alive; return those still alive at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def describe(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        cmd = "?"
    return f"{pid} ({cmd[:120]})"


def kill_tree(proc: subprocess.Popen, grace: float = 10.0) -> list[int]:
    """SIGTERM the process group of ``proc`` (started with start_new_session), then SIGKILL
    whatever is left of it or of its descendants. Returns the pids that had to be killed."""
    tree = [proc.pid] + descendants(proc.pid)
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    tree += [p for p in descendants(proc.pid) if p not in tree]
    stubborn = wait_gone(tree, 2.0)
    for pid in stubborn:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=10)
    wait_gone(stubborn, 5.0)
    return stubborn


def listen_addresses(port: int) -> set[str]:
    """Addresses with a socket in LISTEN state on ``port`` (IPv4 and IPv6), from /proc/net."""
    found = set()
    for name, width in (("tcp", 8), ("tcp6", 32)):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.split(":")
            if state != "0A" or int(hexport, 16) != port:
                continue
            raw = bytes.fromhex(addr)
            if width == 8:
                found.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
            else:  # /proc prints IPv6 as four little-endian 32-bit words
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                found.add(socket.inet_ntop(socket.AF_INET6, words))
    return found


def http_status(url: str, token: str | None = None, method: str = "GET") -> int:
    request = urllib.request.Request(url, method=method)
    if token is not None:
        request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def http_json(url: str, token: str, method: str = "GET"):
    request = urllib.request.Request(url, method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else None


def wait_http(url: str, token: str | None, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}:\n{tail(log)}")
        try:
            if http_status(url, token) == 200:
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"no answer from {url} after {timeout:.0f} s:\n{tail(log)}")


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def jupyter_env(home: Path) -> dict:
    """The project's environment with Jupyter's per-user folders moved into ``home``, so that a
    developer's own Jupyter config, kernels and settings do not change what is tested."""
    from background import BUSY_MACHINE
    env = dict(os.environ, **BUSY_MACHINE)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython")):
        (home / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(home / sub)
    env.pop("JUPYTER_TOKEN", None)
    env.pop("JUPYTER_PATH", None)
    return env


# -- the test's own JupyterLab --------------------------------------------------------------

@dataclass
class Lab:
    """A throwaway JupyterLab on a free localhost port with a random token, serving a copy of
    course/ (so nothing the page saves reaches the repository); tests add their own notebooks
    under `root`."""
    workdir: Path
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: secrets.token_hex(24))
    proc: subprocess.Popen | None = None

    @property
    def root(self) -> Path:
        return self.workdir / "root"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "jupyter.log"

    def start(self, timeout: float = 120.0) -> "Lab":
        shutil.copytree(ROOT / "course", self.root / "course",
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        settings = self.workdir / "lab-settings"
        for rel, values in LAB_SETTINGS.items():
            path = settings / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        cmd = [str(BIN / "jupyter"), "lab", "--no-browser",
               f"--ServerApp.root_dir={self.root}", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={self.token}",
               f"--LabApp.user_settings_dir={settings}",
               f"--LabApp.workspaces_dir={self.workdir / 'workspaces'}",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--ServerApp.shutdown_no_activity_timeout=0",
               # Kernels over ipc sockets in the runtime folder: a TCP port picked for a kernel
               # can be taken by the background jobs' ranks first (autograder/kernel_sockets.py).
               "--KernelManager.transport=ipc"]
        if os.getuid() == 0:
            cmd.append("--allow-root")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.root, env=jupyter_env(self.workdir / "home"),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        wait_http(f"{self.url}/api/status", self.token, self.proc, self.log, timeout)
        return self

    @contextlib.contextmanager
    def extensions_disabled(self, *names: str):
        """Pages loaded inside this block run without these JupyterLab extensions."""
        folder = self.workdir / "home" / "config" / "labconfig"
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "page_config.json"
        config.write_text(json.dumps({"disabledExtensions": {name: True for name in names}}))
        try:
            yield
        finally:
            config.unlink()

    def api(self, path: str, method: str = "GET"):
        return http_json(f"{self.url}/api/{path}", self.token, method)

    def kernels(self) -> list[dict]:
        return self.api("kernels")

    def shutdown_kernels(self) -> None:
        for kernel in self.kernels():
            try:
                self.api(f"kernels/{kernel['id']}", method="DELETE")
            except urllib.error.HTTPError:
                pass

    def stop(self) -> list[str]:
        """Shut the server and its kernels down; return a description of every process that
        outlived a clean shutdown (and had to be killed)."""
        if self.proc is None:
            return []
        tree = [self.proc.pid] + descendants(self.proc.pid)
        if self.proc.poll() is None:
            try:
                self.shutdown_kernels()
                self.api("shutdown", method="POST")
                self.proc.wait(timeout=30)
            except (OSError, urllib.error.URLError, subprocess.TimeoutExpired):
                pass
        leftovers = [describe(p) for p in wait_gone(tree, 10.0)]
        kill_tree(self.proc)
        return leftovers


def new_workdir(prefix: str = "nanoparallel-browser-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


# -- the browser ----------------------------------------------------------------------------

def find_chromium() -> str | None:
    explicit = os.environ.get("NANOPARALLEL_CHROMIUM")
    if explicit:
        return explicit
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def no_browser_reason() -> str | None:
    """Why no browser test can run here, or None. Only a missing browser is a reason to skip;
    a browser that is there and fails is a failure."""
    if find_chromium() is None:
        return ("no chromium browser on PATH: install Debian's `chromium` package "
                "(`apt-get install chromium`; .ci/run does this when it runs as root) or point "
                "NANOPARALLEL_CHROMIUM at a Chromium binary")
    return None


IDLE = "idle"
PROMPT_DONE = re.compile(r"^\[\d+\]:?$")
# A control is anything a learner can move. Plain buttons are "apply" buttons (Run): the test
# presses them after moving a control, and first to get a figure that only appears after Run.
CONTROL_SELECTORS = {
    "slider": ".widget-slider .noUi-handle",
    "dropdown": ".widget-dropdown select",
    "select": ".widget-select select",
    "toggle buttons": ".widget-toggle-buttons",
    "toggle button": "button.widget-toggle-button:not(.widget-toggle-buttons button)",
    "checkbox": ".widget-checkbox input[type=checkbox]",
    "radio buttons": ".widget-radio-box",
    "number": ".widget-text input[type=number]",
}
BUTTON_SELECTOR = "button.widget-button"
# A figure is an image anywhere in the widget (PNG in an Output), compared by a hash of its src.
FIGURES_JS = """root => Array.from(root.querySelectorAll('img')).map(img => {
    const s = img.getAttribute('src') || ''; let h = 0;
    for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
    return s.length + ':' + h; })"""


@dataclass
class Control:
    kind: str
    label: str
    index: int  # among the widget's controls of this kind


class WaitError(AssertionError):
    pass


def poll(what: str, condition, timeout: float, interval: float = 0.1):
    """Call ``condition()`` until it returns something truthy; raise WaitError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# One round trip for what the tests read about a cell; `full` adds its outputs.
CELL_STATE_JS = """([i, full, stderrMime]) => {
    const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
    const cells = panel ? panel.querySelectorAll('.jp-Notebook .jp-Cell') : [];
    const c = cells[i];
    if (!c) return {count: cells.length};
    const cls = c.classList;
    const state = {
        count: cells.length,
        kind: cls.contains('jp-CodeCell') ? 'code' : cls.contains('jp-MarkdownCell') ? 'markdown' : 'raw',
        active: cls.contains('jp-mod-active'),
        prompt: (c.querySelector('.jp-InputPrompt')?.textContent || '').trim(),
    };
    if (!full) return state;
    const out = c.querySelector('.jp-Cell-outputArea');
    const top = out ? Array.from(out.querySelectorAll(
        ':scope > .jp-OutputArea-child > .jp-OutputArea-output')) : [];
    state.stderr = Array.from(
        c.querySelectorAll('.jp-OutputArea-output[data-mime-type="' + stderrMime + '"]'))
        .map(e => e.textContent.slice(-1500));
    state.text = out ? out.textContent : '';
    state.plain = top.filter(e => e.dataset.mimeType === 'text/plain').map(e => e.textContent.slice(0, 300));
    return state;
}"""
STDERR_MIME = "application/vnd.jupyter.stderr"
NOT_RUN = ("[ ]:", "[ ]", "")


class NotebookPage:
    """One notebook open in JupyterLab, in its own workspace (no tabs restored from elsewhere)."""

    def __init__(self, page, lab: Lab, path: str):
        self.page, self.lab, self.path = page, lab, path
        self.panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
        self.cells = self.panel.locator(".jp-Notebook .jp-Cell")
        self.kernel_id: str | None = None

    # -- opening and the kernel -------------------------------------------------------------

    def open(self, timeout: float = 90.0) -> "NotebookPage":
        workspace = "t" + secrets.token_hex(6)
        self.page.goto(f"{self.lab.url}/lab/workspaces/{workspace}/tree/{self.path}?token={self.lab.token}")
        self.cells.first.wait_for(timeout=timeout * 1000)
        self.wait_kernel_ready(timeout)
        return self

    def session(self) -> dict | None:
        for s in self.lab.api("sessions"):
            if s.get("path") == self.path:
                return s
        return None

    def kernel(self) -> dict | None:
        """The server's view of this notebook's kernel (state, last activity, connections)."""
        if self.kernel_id is None:
            s = self.session()
            if not s or not s.get("kernel"):
                return None
            self.kernel_id = s["kernel"]["id"]
        try:
            return self.lab.api(f"kernels/{self.kernel_id}")
        except urllib.error.HTTPError:
            return None

    def indicator(self) -> str | None:
        return self.page.evaluate(
            "() => document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) "
            ".jp-Notebook-ExecutionIndicator')?.dataset.status || null")

    def wait_kernel_ready(self, timeout: float = 90.0) -> dict:
        """The page shows an idle kernel that the server says is connected and idle.
        (The page says "idle" once before any kernel exists: the server's view rules that out.)"""
        def ready():
            k = self.kernel()
            return k if (k and k["connections"] >= 1 and k["execution_state"] == IDLE
                         and self.indicator() == IDLE) else None
        return poll(f"the kernel of {self.path} to start and connect", ready, timeout)

    def last_activity(self) -> str | None:
        k = self.kernel()
        return k["last_activity"] if k else None

    def wait_idle(self, after: str | None, timeout: float = 120.0, quiet: float = 0.0,
                  silent_after: float | None = None) -> bool:
        """Wait until the kernel has been active since ``after`` (a `last_activity` value), is
        idle on the server and in the page, and (with ``quiet``) has sent nothing for that long.
        With ``silent_after``, return False if the kernel heard nothing in that many seconds."""
        state = {"last": None, "since": 0.0}
        t0 = time.monotonic()

        def settled():
            k = self.kernel()
            if (silent_after is not None and k and k["last_activity"] == after
                    and time.monotonic() - t0 > silent_after):
                return "silent"
            if not k or k["execution_state"] != IDLE or (after is not None and k["last_activity"] == after):
                return False
            if self.indicator() != IDLE:
                return False
            if quiet <= 0:
                return True
            if k["last_activity"] != state["last"]:
                state["last"], state["since"] = k["last_activity"], time.monotonic()
                return False
            return time.monotonic() - state["since"] >= quiet
        return poll(f"the kernel of {self.path} to be idle", settled, timeout, interval=0.1) is True

    # -- cells ------------------------------------------------------------------------------

    def state(self, i: int, full: bool = False) -> dict:
        return self.page.evaluate(CELL_STATE_JS, [i, full, STDERR_MIME])

    def count(self) -> int:
        return self.state(0)["count"]

    def kind(self, i: int) -> str:
        return self.state(i)["kind"]

    def is_active(self, i: int) -> bool:
        return bool(self.state(i).get("active"))

    def prompt(self, i: int) -> str:
        return self.state(i).get("prompt", "")

    def select(self, i: int) -> None:
        """Make cell ``i`` the active cell, in command mode (a click on its prompt)."""
        self.cells.nth(i).locator(".jp-InputPrompt").first.click()
        self.page.keyboard.press("Escape")
        poll(f"cell {i} to be selected", lambda: self.is_active(i), 10)

    def source(self, i: int) -> str:
        return self.cells.nth(i).locator(".jp-InputArea-editor").first.inner_text()

    def run_cell(self, i: int, timeout: float = 120.0) -> float:
        """Run cell ``i`` with Shift+Enter, as a learner does; wait for it and its kernel to
        finish. Returns the seconds it took. A markdown cell is just rendered."""
        t0 = time.monotonic()
        st = self.state(i)
        if not st["active"]:
            self.select(i)
        last = i == st["count"] - 1
        key = "Control+Enter" if last else "Shift+Enter"  # Shift+Enter on the last cell adds one
        if st["kind"] != "code":
            self.page.keyboard.press(key)
            if not last:
                poll(f"cell {i + 1} to become active", lambda: self.is_active(i + 1), 10, 0.05)
            return time.monotonic() - t0
        before = self.last_activity()
        for _attempt in range(3):  # a key press can be lost while the page settles: retry
            self.page.keyboard.press(key)
            try:
                poll(f"cell {i} to be queued", lambda: self.prompt(i) not in NOT_RUN, 5, 0.05)
                break
            except WaitError:
                if self.prompt(i) not in NOT_RUN:
                    break
                self.select(i)
        else:
            raise WaitError(f"cell {i} did not start after three presses of {key}")
        try:
            poll(f"cell {i} to finish", lambda: PROMPT_DONE.match(self.prompt(i)), timeout, 0.05)
        except WaitError:
            raise WaitError(f"cell {i} was still running after {timeout:.0f} s (prompt "
                            f"{self.prompt(i)!r}): the kernel hangs on\n{self.source(i)[:400]}") from None
        self.wait_idle(after=before, timeout=timeout)
        try:  # widget views are created asynchronously after their output arrives
            poll(f"the widgets of cell {i} to render",
                 lambda: "Loading widget" not in self.state(i, full=True).get("text", ""), 15, 0.05)
        except WaitError:
            pass  # errors() reports the view that never rendered
        return time.monotonic() - t0

    def errors(self, i: int) -> list[str]:
        """What cell ``i`` shows that a learner would read as an error: stderr or a traceback
        (JupyterLab renders both with the stderr MIME type, also inside widget outputs), and
        widget views that failed or fell back to their text."""
        st = self.state(i, full=True)
        found = ["stderr/error output: " + t for t in st.get("stderr", [])]
        text = st.get("text", "")
        for marker in WIDGET_ERROR_TEXTS:
            if marker.lower() in text.lower():
                found.append(f"widget error {marker!r}: {text[:500]}")
        for t in st.get("plain", []):
            if WIDGET_REPR.match(t) or WIDGET_MIME in t:
                found.append(f"a widget shown as plain text (no widget view): {t}")
        return found

    def widget_roots(self, i: int):
        """The widget views that cell ``i`` displays (the outermost widget of each output)."""
        return self.cells.nth(i).locator(
            ".jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output > .jupyter-widgets")

    def save(self, timeout: float = 30.0, presses: int = 3) -> dict:
        """Save from the page (Ctrl+S) and return the notebook the server wrote. The key is pressed
        again when nothing was written: on a busy machine a keystroke can reach a page still
        redrawing outputs and save nothing (a CI run waited 30 s on 07's notebook, marked unsaved)."""
        before = self.lab.api(f"contents/{self.path}?content=0")["last_modified"]
        for press in range(presses):
            self.page.keyboard.press("Escape")
            self.page.keyboard.press("Control+s")
            try:
                poll(f"{self.path} to be saved", lambda: self.lab.api(
                    f"contents/{self.path}?content=0")["last_modified"] != before, timeout / presses, 0.2)
                break
            except WaitError:
                if press == presses - 1:
                    raise
        return self.lab.api(f"contents/{self.path}")["content"]

    def shut_down_kernel_from_menu(self) -> None:
        """Kernel -> Shut Down Kernel, as a learner does it."""
        self.page.get_by_role("menuitem", name="Kernel", exact=True).click()
        self.page.locator(".lm-Menu-item", has_text="Shut Down Kernel").first.click()
        accept = self.page.locator(".jp-Dialog .jp-mod-accept")
        try:  # some versions ask first
            accept.wait_for(timeout=1500)
            accept.click()
        except Exception:  # noqa: BLE001 - no dialog: nothing to confirm
            pass

    # -- widgets ----------------------------------------------------------------------------

    def figures(self, root) -> list[str]:
        return root.evaluate(FIGURES_JS)

    def controls(self, root) -> list[Control]:
        found = []
        for kind, selector in CONTROL_SELECTORS.items():
            loc = root.locator(selector)
            for k in range(loc.count()):
                found.append(Control(kind, self._label(loc.nth(k)), k))
        return found

    def _label(self, element) -> str:
        return element.evaluate("""e => {
            const box = e.closest(
                '.widget-inline-hbox, .widget-toggle-buttons, .widget-radio-box, .widget-checkbox') || e;
            const label = box.querySelector('.widget-label-basic') || box.querySelector('.widget-label');
            const text = (label && label.textContent) || e.getAttribute('aria-label') || e.textContent;
            return (text || '').trim().slice(0, 40);
        }""")

    def press_buttons(self, root) -> bool:
        """Press the widget's first plain button (Run), wait for the kernel; False if none."""
        buttons = root.locator(BUTTON_SELECTOR)
        if not buttons.count():
            return False
        button = buttons.first
        poll("the widget's button to be enabled", button.is_enabled, 120)
        before = self.last_activity()
        button.click()
        self.wait_idle(after=before, quiet=0.15)
        poll("the widget's button to be enabled again", button.is_enabled, 120)
        return True

    def move(self, root, control: Control, attempt: int) -> str | None:
        """Move ``control`` to another value (``attempt`` picks which); return what was done
        (None: it has no other value)."""
        el = root.locator(CONTROL_SELECTORS[control.kind]).nth(control.index)
        el.scroll_into_view_if_needed()
        if control.kind == "slider":
            handle = el.bounding_box()
            base = el.locator("xpath=ancestor::*[contains(@class,'noUi-base')]").first.bounding_box()
            vertical = base["height"] > base["width"]
            where = [0.8, 0.2, 0.5][attempt % 3]
            cx, cy = handle["x"] + handle["width"] / 2, handle["y"] + handle["height"] / 2
            if vertical:
                tx, ty = cx, base["y"] + (1 - where) * base["height"]
            else:
                tx, ty = base["x"] + where * base["width"], cy
            if abs(tx - cx) + abs(ty - cy) < 10:  # already there: go to the other side
                tx = base["x"] + (1 - where) * base["width"] if not vertical else tx
                ty = base["y"] + where * base["height"] if vertical else ty
            self.page.mouse.move(cx, cy)
            self.page.mouse.down()
            self.page.mouse.move(tx, ty, steps=1)
            self.page.mouse.up()
            return f"dragged to {where:.0%}"
        if control.kind in ("dropdown", "select"):
            n = el.locator("option").count()
            if n < 2:
                return None
            # The option after the current one: a second attempt reaches a third value.
            target = (max(el.evaluate("e => e.selectedIndex"), 0) + 1) % n
            el.select_option(index=target)
            return f"option {target}"
        if control.kind in ("toggle buttons", "radio buttons"):
            items = el.locator("button" if control.kind == "toggle buttons" else "input[type=radio]")
            n = items.count()
            if n < 2:
                return None  # a single option: nothing to move to
            current = el.evaluate("""e => Array.from(e.querySelectorAll('button, input[type=radio]'))
                .findIndex(b => b.classList.contains('mod-active') || b.checked)""")
            target = items.nth((max(current, 0) + 1) % n)
            text = target.evaluate("e => (e.textContent || e.value || '').trim()")
            target.click()
            return f"chose {text!r}"
        if control.kind in ("toggle button", "checkbox"):
            el.click()
            return "toggled"
        if control.kind == "number":
            value = float(el.input_value() or 0)
            step = float(el.get_attribute("step") or 1) if (el.get_attribute("step") or "any") != "any" else 1
            hi = el.get_attribute("max")
            new = value + step * (attempt + 1)
            if hi not in (None, "") and new > float(hi):
                new = value - step * (attempt + 1)
            el.fill(str(int(new) if new == int(new) else new))
            el.press("Enter")
            return f"set to {new:g}"
        raise ValueError(control.kind)

    def exercise_widget(self, root, on_first_figure=None, figure_timeout: float = 10.0,
                        change_timeout: float = 2.0) -> dict:
        """Bring up the widget's figure (pressing its button if that is what draws it; then
        ``on_first_figure()`` is called, e.g. for a screenshot), then move each control
        (pressing the button after it, if there is one) and record whether the figure changed.

        Returns {"initial": how the first figure appeared (None: never), "controls": [{kind,
        label, action, changed}]}.
        """
        report = {"initial": "drawn when displayed", "controls": []}
        if not self.figures(root) and root.locator(BUTTON_SELECTOR).count():
            self.press_buttons(root)
            report["initial"] = "drawn after pressing its button"
        try:
            poll("the widget's first figure", lambda: self.figures(root), figure_timeout)
        except WaitError:
            report["initial"] = None
            return report
        if on_first_figure is not None:
            on_first_figure()
        for control in self.controls(root):
            entry = {"kind": control.kind, "label": control.label, "changed": False, "action": []}
            for attempt in range(2):  # a second value if the first happens to draw the same
                figures = self.figures(root)
                before = self.last_activity()
                action = self.move(root, control, attempt)
                if action is None:
                    break
                entry["action"].append(action)
                if not self.wait_idle(after=before, quiet=0.15, silent_after=10):
                    entry["action"][-1] += " (the kernel heard nothing)"
                self.press_buttons(root)
                try:
                    # The kernel is idle again, so the new image is already on its way.
                    poll("the figure to change", lambda: (now := self.figures(root)) and now != figures,
                         change_timeout)
                    entry["changed"] = True
                    break
                except WaitError:
                    pass
            report["controls"].append(entry)
        self.wait_idle(after=None, quiet=0.15)
        return report
