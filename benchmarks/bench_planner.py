"""Where notebook 07's planner puts GPT-NeoX-20B's published plan (TP 2, PP 4, DP 12, ZeRO-1,
b = 4, m = 32, recomputation) among the plans that fit, with the solution's memory_per_gpu and
step_time: at the preset hfu (117 TFLOP/s per GPU over the A100's 312, Black et al. 2022,
section 3) and at the hfu calibrated so that the published plan's step takes as long as that
throughput says.

    python benchmarks/bench_planner.py
"""
from __future__ import annotations

import dataclasses

from solution_cells import run_cells

from nanoparallel.lessons.planner import NEOX_20B, NEOX_CLUSTER, NEOX_PLAN, candidate_plans, search

BATCH = 1536


def rank(cluster, memory, time):
    ranked = search(NEOX_20B, cluster, BATCH, memory, time)
    plans = [r.plan for r in ranked]
    return plans.index(NEOX_PLAN) + 1, len(ranked), ranked


def main():
    ns = run_cells("07_3d_parallelism", ("setup", "memory", "time"), {"__name__": "solution_07_3d_parallelism"})
    memory, time = ns["memory_per_gpu"], ns["step_time"]
    published = time(NEOX_20B, NEOX_CLUSTER, NEOX_PLAN)
    communication = published["tp"] + published["pp"] + published["dp"]
    paper_step = 8 * NEOX_20B.params * BATCH * NEOX_20B.seq / (NEOX_CLUSTER.gpus * 117e12)
    calibrated = dataclasses.replace(
        NEOX_CLUSTER, hfu=NEOX_CLUSTER.hfu * (published["compute"] + published["bubble"]) / (paper_step - communication))
    print(f"{len(candidate_plans(NEOX_20B, NEOX_CLUSTER, BATCH))} candidate plans for GPT-NeoX-20B on {NEOX_CLUSTER.name}")
    print(f"published plan: {sum(memory(NEOX_20B, NEOX_PLAN).values()) / 1e9:.1f} GB per GPU, "
          f"{sum(published.values()):.1f} s per step at hfu {NEOX_CLUSTER.hfu:.3f}; the paper's throughput: {paper_step:.1f} s")
    for name, cluster in (("preset", NEOX_CLUSTER), ("calibrated", calibrated)):
        position, fits, ranked = rank(cluster, memory, time)
        print(f"hfu {cluster.hfu:.3f} ({name}): the published plan is #{position} of {fits} that fit; "
              f"the fastest: {ranked[0].plan.describe()}, {ranked[0].seconds:.1f} s")


if __name__ == "__main__":
    main()
