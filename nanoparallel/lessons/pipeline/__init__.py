"""Lesson 04, pipeline parallelism.

- `schedule`: schedules as data (GPipe, 1F1B, ZB-H1), validated and simulated;
- `stage`: a stage's plumbing that is not the lesson (deferred weight gradients, saved activations);
- `interleaved`: interleaved 1F1B, simulated;
- `torch_schedules`: torch's own pipeline schedules, for the comparison at the end.
"""
