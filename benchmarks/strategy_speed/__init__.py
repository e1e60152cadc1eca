"""Every distribution strategy side by side, the levers of the best, and the two ceilings.

    python -m benchmarks.strategy_speed [--runs 3] [--steps 200] [--quick] [--variants a,b]

Trains DeepFM at the SageMaker sample's defaults (embedding 32, layers
128-64-32, feature_size 117,581, 39 fields) on the synthetic dataset with the
same GLOBAL batch in every variant (1024; per-replica batch = global /
replicas): `single`, `tower` (2 CPU towers), `mirrored` (2 CPU replicas),
`ps` (1 parameter server and 2 workers on localhost, through
`deepfm.launch`) and `horovod` (2 ranks, through `deepfm.launch`), then
levers on the tower method: the sparse-row `lazy_adam` optimizer, XLA,
intra/inter-op thread pools, the tower split and the OpenMP/KMP variables.
In the same run it measures the two ceilings: the input pipeline alone
(the training `DatasetBuilder`, iterated) and the compute alone (one decoded
batch, cached and repeated, through the same Estimator and model_fn).

Each run of a variant is a fresh process tree (the real `python -m
deepfm.train` or `python -m deepfm.launch`), variants interleaved round by
round on `benchmarks.harness`. Per run:

* examples/sec: the whole job's throughput after warm-up. Every training
  process records its progress through `deepfm.runtime.hooks.ProgressHook` in its
  own JSON-lines `--progress_file` (wall time and step of this run, every
  `LOG_EVERY_STEPS` steps and at its last step). The window opens when the last training process
  has passed `warmup_steps` of its own steps and closes when the first one
  logs its last line; throughput = examples all processes trained in that
  window (each process's steps, interpolated at the window's ends, times its
  batch) / the window's wall time. For one process this is its rate from
  step `warmup_steps` to its last step; for Horovod's synchronous ranks it is
  the sum over ranks; for the asynchronous parameter-server workers it
  counts only the time they all train at once (the chief starts seconds
  before the other worker, which a per-worker average would hide). The
  hook's own mean (the chief's `--metrics_file` `examples_per_sec`, which
  leaves out the time between steps) is kept in the JSON as
  `hook_examples_per_sec`.
* CPU utilization: CPU seconds of the whole process tree within the window
  / its wall seconds / cores (`benchmarks.common.ProcessTreeSampler`).
* peak resident memory of each process of the tree (launcher, parameter
  servers, workers, ranks); the table shows the largest.
* AUC on the validation split after the same N = (warm-up + timed steps) x
  global batch training examples in every variant (the chief's
  `--metrics_file`).

Results go to `benchmarks/results/strategies.{md,json,png}`. One concept per
module:

* `variants`: what is measured (`Variant`, `all_variants`, the lever
  comparisons);
* `config`: one benchmark's options (`BenchmarkConfig`, its flags generated);
* `measure`: one run of a variant in a fresh process tree and its
  measurement window (`RunResult`), and the variant as the harness runs it;
* `ceilings`: the input and compute ceilings, each run as a child process
  (`python -m benchmarks.strategy_speed.ceilings`);
* `report`: the medians, ratios, targets, the report's JSON and chart;
* `cli`: `main`.
"""
