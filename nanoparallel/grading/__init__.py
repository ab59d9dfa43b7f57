"""The checks graded cells call, and the witness the autograder scores from.

Course tooling (imports the runtime):
- `checks`: `assert_close`, `check_trace` and the other checks a notebook's test cells call;
- `check_code`, `notebook_exercise`: an exercise's code read from a notebook, and the checks that
  read code rather than run it;
- `launch`: `python -m nanoparallel.grading.launch notebook.ipynb` under torchrun.

The witness (imports nothing from the runtime, so that the runtime can install it):
- `guard`: inside the grading kernel, which graded cell ran unchanged to its end;
- `rank_guard`, `comm_witness`: the same inside each rank, and communication the trace missed;
- `provenance`: whose code a frame or a function is (the engine's, a library's, the notebook's).
"""
