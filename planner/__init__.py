"""The planner: what a job's layout costs, fitted to measured runs, and the layout it should take.

Apart from the strategies it plans for, as TorchRec keeps its planner apart
from its sharders:

* `cost_model.py`: a step's seconds per strategy from its compute, bytes
  and the hosts' cores and links (arithmetic, no TensorFlow);
* `cost_fit.py`: the model's constants fitted to measured points;
* `calibrated.py`: the constants this library ships, fitted to its own
  measured runs, and a reference step;
* `benchmark_fit.py`: reading benchmark results, fitting and checking
  the model against them (`deepfm.advise --fit_to`);
* `layouts.py`: processes per host and the strategy a host's cores favour
  (`deepfm.launch --np 0`, `deepfm.advise`, `--distribution auto`).

`deepfm.advise` is its command; `jobs.auto_distribution` turns its choice
into a job's distribution.
"""
