"""What a learner's code runs on: persistent CPU ranks and what they record.

- `cluster`: `Cluster`, the ranks' parent (start, run, resize, close, deadlock and stall
  detection); `worker`, the loop each rank runs; `board`, what each rank is doing now (shared
  memory the parent reads to name what a stuck rank waits for); `errors`, the named errors;
- `tracing`, `tracing_functional`: wrappers around torch.distributed that record every call into
  a `trace.Trace`; `context`: `region(...)` labels and the rank's current tracer; `timeline`:
  a trace drawn (`Trace.plot`); `units`: bytes and seconds for labels;
- `memory`: tensor bytes by what they are for (parameters, gradients, optimizer state, activations);
- `flops`: matrix-multiply FLOPs with the time each ran, read against a trace's regions;
- `race`: two ranks' calls in flight at once (overlap measured, not assumed);
- `torchrun_cluster`: the same `Cluster` API on ranks that torchrun started.

Nothing here imports `lessons` or the course tooling in `grading`; the ranks install the
witness (`grading.rank_guard`, `grading.comm_witness`) only when the autograder asks.
"""
