"""What each part of `make test` costs when it runs alone: wall seconds and CPU seconds.

The suite is CPU-bound on two cores (docs/testing.md): run whole, the CPU is busy 99.9 % of the
time, so its wall time is its CPU work divided by the cores, plus what parts lose to each other.
This script measures that work part by part, each part a pytest selection run by itself, so
that a budget can be checked with arithmetic instead of guessed from a whole run's wall time.

CPU is the whole machine's busy time over the run, read from /proc/stat: it counts every
process a part starts (sandboxed kernels, their fork servers and ranks, chromium) without
having to find them. Run it on an otherwise idle machine; the idle machine's own trickle
(about 1 % of a core here) is counted too. Not `make bench`: all parts take about 50 minutes.

    python benchmarks/suite_budget.py [PART ...]      (default: every part; --list names them)
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from background import ASSIGNMENTS  # noqa: E402
CLASS_TESTS = "blank_zero or runs_without_error or tampering or hostile or wrong_answer_loses"
MUTANT_TESTS = "every_mutant or written_another_way"


def parts() -> dict[str, list[str]]:
    """Part name -> pytest arguments. Together they are the whole suite."""
    found = {
        "engine and tools (make test-fast)": ["-m", "not notebooks and not browser"],
        "browser": ["tests/test_browser.py"],
        "grading a class (tiny course)": ["tests/test_grading_class.py"],
        "torchrun (real processes)": ["tests/test_launch.py", "-m", "notebooks"],
        "answer leaks": ["tests/test_answer_leaks.py"],
        "nbval": ["tests/test_nbval.py"],
        "releases are fresh": ["tests/test_course.py", "-k", "fresh_release"],
    }
    for a in ASSIGNMENTS:
        found[f"class {a}"] = ["tests/test_course.py", "tests/test_integrity.py", "tests/test_tampering.py",
                               "tests/test_wrong_answer_graded.py", "-k", f"{a} and ({CLASS_TESTS})"]
        found[f"mutants {a}"] = ["tests/test_course.py", "-k", f"{a} and ({MUTANT_TESTS})"]
    return found


def busy_cpu_seconds() -> float:
    """CPU seconds the machine has spent busy since boot, summed over its cores."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def measure(args: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds, pytest's last line) of one part run alone."""
    cpu0, t0 = busy_cpu_seconds(), time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True)
    wall, cpu = time.monotonic() - t0, busy_cpu_seconds() - cpu0
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    return wall, cpu, last


def main() -> None:
    table = parts()
    if "--list" in sys.argv:
        print("\n".join(table))
        return
    chosen = [p for p in table if not sys.argv[1:] or any(w in p for w in sys.argv[1:])]
    print(f"{'part':38} {'wall s':>7} {'CPU s':>7} {'cores':>6}  pytest", flush=True)
    total_wall = total_cpu = 0.0
    for name in chosen:
        wall, cpu, last = measure(table[name])
        total_wall, total_cpu = total_wall + wall, total_cpu + cpu
        print(f"{name:38} {wall:7.0f} {cpu:7.0f} {cpu / wall:6.2f}  {last}", flush=True)
    print(f"{'all of the above':38} {total_wall:7.0f} {total_cpu:7.0f}")
    print(f"fifteen minutes on 2 cores is at most 1,800 CPU seconds; these parts need {total_cpu:,.0f}, "
          f"so at least {total_cpu / 2 / 60:.0f} minutes on 2 cores if nothing were lost to contention")


if __name__ == "__main__":
    main()
