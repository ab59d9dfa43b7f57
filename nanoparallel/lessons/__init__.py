"""What each lesson builds on, named after the lessons.

- shared by 02-07: `models` (TinyMLP, TinyGPT and their batches) and `reference` (the
  single-process training every parallel version must reproduce);
- 00-02 and 07: `cost`, the alpha-beta model of links and collectives;
- 04: `pipeline` (schedules as data, the stage's plumbing, interleaved 1F1B, torch's schedules);
- 05: `tensor_parallel`; 06: `moe`; 07: `planner` (3D parallelism's memory and time model);
- `viz`: every lesson's pictures and widgets.
"""
