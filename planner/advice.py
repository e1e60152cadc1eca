"""What `deepfm.advise` is asked: the dataset to measure a step on, the cluster to predict for, and the fits.

`AdviceConfig`'s fields are the command's flags (generated from them by
`cli.config_flags`): a dataset root, the hosts and their cores, links and
transport, the measurement's batch and steps, and the benchmark results to
fit the cost model to or check it against (`planner.benchmark_fit`). This
module imports no TensorFlow.
"""

import dataclasses
from typing import Optional, Tuple

from cli import config_flags
from deepfm import config as config_lib
from planner import benchmark_fit as fit_lib
from planner import cost_model, layouts

DEFAULT_STEPS = 30
DEFAULT_WARMUP_STEPS = 10
# The fields that must be at least one.
POSITIVE = ("hosts", "cores_per_host", "batch_size", "steps")


@dataclasses.dataclass(frozen=True)
class AdviceConfig:
    """One question to the planner (see the module docstring); each field is a flag of `deepfm.advise`."""

    data: str = dataclasses.field(metadata=config_flags.metadata(
        "A dataset root (metadata.json, train/) to measure a step on."))
    hosts: int = config_flags.field(2, "Hosts of the cluster.")
    cores_per_host: int = config_flags.field(1, "Cores per host.")
    ranks_per_host: int = config_flags.field(
        0, "Training processes per host, each on cores_per_host / ranks_per_host cores (0: advise it, trying every "
        "number that divides the cores).")
    link_gbps: float = config_flags.field(layouts.DEFAULT_LINK_GBPS, "Each host's link in Gbit/s.")
    transport: str = config_flags.field(
        cost_model.MPI, "How Horovod's ranks talk: mpi, with waits that yield the core, as SageMaker's mpi "
        "distribution, a Kubernetes MPIJob and deepfm.launch where mpirun is installed start them; or gloo "
        "(horovodrun --gloo).", choices=cost_model.TRANSPORTS)
    latency_us: float = config_flags.field(cost_model.DEFAULT_LATENCY_S * 1e6, "One-way latency between hosts in us.")
    batch_size: int = config_flags.field(config_lib.DEFAULT_BATCH_SIZE, "Examples per replica and step.")
    dedup_lookups: bool = config_flags.field(False, "Deduplicated embedding lookups.")
    steps: int = config_flags.field(DEFAULT_STEPS, "Timed steps of the measurement.")
    warmup_steps: int = config_flags.field(DEFAULT_WARMUP_STEPS, "Steps before the timed ones.")
    compute_ms: Optional[float] = config_flags.field(None, "Use this step time instead of measuring one.")
    fit_to: Tuple[str, ...] = config_flags.field(
        (), "benchmarks.scale_out results JSONs (comma-separated) to fit the costs of a distributed step to "
        "(default: the costs fitted to %s)." % " and ".join(fit_lib.FITTED_TO))
    fit_mpi_to: Tuple[str, ...] = config_flags.field(
        (), "benchmarks.scale_out results JSONs (comma-separated) with hybrid+mpi_yield at two batches, to fit the "
        "costs over MPI to (default: the costs fitted to %s)." % " and ".join(fit_lib.MPI_FITTED_TO))
    check_against: Tuple[str, ...] = config_flags.field(
        (), "benchmarks.scale_out or benchmarks.multicore results JSONs (comma-separated): print the predictions "
        "next to their measured distributed runs.")
    fit_cores_to: Tuple[str, ...] = config_flags.field(
        (), "benchmarks.multicore results JSONs (comma-separated) to fit what a process's further cores give to "
        "(default: %s)." % " and ".join(fit_lib.CORES_FITTED_TO))
    json: bool = config_flags.field(
        False, "Print one JSON object (the measured step, every prediction, the pick and its reason) instead of "
        "the tables; what `--distribution auto` of `deepfm.sagemaker` reads.")

    def __post_init__(self):
        for name in POSITIVE:
            if getattr(self, name) < 1:
                raise ValueError("--%s must be >= 1, got %r" % (name, getattr(self, name)))
