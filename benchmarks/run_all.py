"""Run every benchmark in this folder and print its figures (`make bench`)."""
import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    for script in sorted(Path(__file__).parent.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        sys.argv = [str(script)]
        runpy.run_path(str(script), run_name="__main__")
        print(flush=True)
