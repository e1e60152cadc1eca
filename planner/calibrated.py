"""The cost model's machine constants as fitted to this project's measured runs, and a reference step.

`deepfm.advise` measures a step and uses these constants for what a step
alone cannot tell; `planner.layouts` uses them with `REFERENCE_STEP`
where nothing is measured (a launcher choosing processes per host). Refit
them with `deepfm.advise --fit_to` and `--fit_cores_to`; the figures behind
each are in docs/predicting.md ("Predicting before running").
This module imports no TensorFlow.
"""

from planner import cost_model

# What a distributed step costs beyond compute and the link (`cost_model.StepCosts`), fitted by
# `cost_fit.calibrate` (`deepfm.advise --fit_to`) to these runs of benchmarks.scale_out at two batches
# (2 hosts of one core of the 2-core development machine).
FITTED_TO = ("benchmarks/results/scale_out_costs_1024.json", "benchmarks/results/scale_out_costs_8192.json")
STEP_COSTS = {
    cost_model.HOROVOD: cost_model.StepCosts(overhead_s=3.88e-3, cpu_s_per_byte=0.904e-9, compute_factor=0.182),
    cost_model.PS: cost_model.StepCosts(overhead_s=10.69e-3, cpu_s_per_byte=0.609e-9, compute_factor=0.1355),
    cost_model.HYBRID: cost_model.StepCosts(overhead_s=21.83e-3, cpu_s_per_byte=0.904e-9, compute_factor=0.122),
}
# The Horovod strategies' costs over MPI with yielding waits (`cost_model.MPI`: SageMaker's and Kubernetes' MPI
# jobs), fitted by `deepfm.advise --fit_mpi_to` to these runs' `hybrid+mpi_yield`, `horovod+mpi_yield` and
# `horovod+dedup+mpi_yield` (2 hosts of one core, batches 1,024 and 8,192 on a quiet machine; at 8,192 with CowClip
# on the distinct rows), with each strategy's cost per byte over Gloo. `horovod_dense` has none of its own over MPI.
MPI_FITTED_TO = ("benchmarks/results/scale_out_1024_mpi.json", "benchmarks/results/scale_out_1024_horovod_mpi.json",
                 "benchmarks/results/scale_out_8192_distinct_clip.json")
STEP_COSTS[cost_model.costs_key(cost_model.HYBRID, cost_model.MPI)] = cost_model.StepCosts(
    overhead_s=0.755e-3, cpu_s_per_byte=0.904e-9, compute_factor=0.0865)
STEP_COSTS[cost_model.costs_key(cost_model.HOROVOD, cost_model.MPI)] = cost_model.StepCosts(
    overhead_s=0.0, cpu_s_per_byte=0.904e-9, compute_factor=0.1571)
# What a process's further cores give (`cost_model.CoreCosts`), fitted by `deepfm.advise --fit_cores_to` to
# CORES_FITTED_TO (issue 33's figures on 16 vCPUs): the serial share to single on 4 vCPUs (2.36x one), the spread
# to horovod at 2 hosts of 4 vCPUs against 2 hosts of 1 (batch 1,024); the other rows of the file are held out.
CORES_FITTED_TO = ("benchmarks/results/multicore_16vcpu_issue33.json",)
CORE_COSTS = cost_model.CoreCosts(serial_fraction=0.2312, exchange_spread=0.4473)
# The default model (embedding 32, layers 128-64-32, lazy_adam) on `data/synthetic_300k` at batch 1,024, one
# process on one core of the development machine (`single` in benchmarks.scale_out: 23 ms a step; 39,936 ids of
# which 5,437 distinct per batch, `deepfm.advise`), with the constants above.
REFERENCE_STEP = cost_model.StepProfile(
    compute_s=0.023, batch_size=1024, ids_per_step=39_936, distinct_ids_per_step=5_437.0, embedding_size=32,
    feature_size=117_581, dense_params=170_242, step_costs=STEP_COSTS, dedup=False, core_costs=CORE_COSTS)
