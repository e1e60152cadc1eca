"""Processes per host and threads per process, chosen from a host's cores with the cost model.

A host of V vCPUs on C physical cores (V / C hyperthreads each) can run R
training processes for any R that divides C, each pinned to (or sharing)
V / R vCPUs and running V / R TensorFlow threads (`--intra_op_threads`,
`--inter_op_threads`). `predict_layouts` predicts every strategy at every
such R (`planner.cost_model`: Amdahl's law for a process's threads, the
exchange's cost partly spread over a rank's cores); `choose_layout` picks
the strategy and R; `for_host` picks R for a strategy already chosen (a
launcher's), from a measured step or `calibrated.REFERENCE_STEP`, and says
why. The measurements behind the constants: one process on 4 vCPUs ran
2.36x one vCPU, and 4 `hybrid` ranks of 4 vCPUs on 16 gave 2.0-2.7x one
4-vCPU process (issue 33's 16-vCPU figures, docs/predicting.md).

`ps` keeps SageMaker's layout: one worker (and one parameter server) per
host, the worker on the host's cores. Hyperthreads are not modelled as
cores: R divides the physical cores and each process gets the hyperthreads
of its cores as threads. This module imports no TensorFlow.
"""

import dataclasses
from typing import List, Optional, Sequence, Tuple

from planner import calibrated, cost_model

DEFAULT_LINK_GBPS = 25.0
# Strategies that run one training process per host whatever its cores (SageMaker's parameter-server layout).
ONE_PER_HOST = (cost_model.PS,)


def predict_layouts(profile: cost_model.StepProfile, cluster: cost_model.Cluster,
                    strategies: Sequence[str] = cost_model.STRATEGIES) -> List[cost_model.Prediction]:
    """Every strategy at every number of processes per host that divides the host's cores, best first.

    `single` is one process on all of one host's cores, `ps` one worker per
    host; a distributed strategy needs two processes or more.
    """
    predictions = []
    for ranks in cost_model.divisors(cluster.cores_per_host):
        shaped = cluster.with_ranks(ranks)
        for strategy in strategies:
            if strategy == cost_model.SINGLE or strategy in ONE_PER_HOST:
                if ranks != 1:
                    continue
            if strategy != cost_model.SINGLE and shaped.processes < 2:
                continue
            predictions.append(cost_model.predict(strategy, profile, shaped))
    return sorted(predictions, key=lambda p: -p.examples_per_sec)


def layout_name(prediction: cost_model.Prediction) -> str:
    """`hybrid 8x2`: the strategy, its processes per host x the cores of each."""
    return "%s %dx%d" % (prediction.strategy, prediction.ranks_per_host, prediction.threads)


def choose_layout(profile: cost_model.StepProfile, cluster: cost_model.Cluster,
                  strategies: Sequence[str] = cost_model.STRATEGIES) -> Tuple[cost_model.Prediction, str]:
    """`(prediction, reason)`: the strategy and processes per host with the highest predicted examples/sec.

    Every number of processes per host that divides `cluster.cores_per_host`
    is tried (`predict_layouts`); the reason names the pick's figures, the
    best layout of one process per host and of one process per core, and
    the runner-up.
    """
    ranked = predict_layouts(profile, cluster, strategies)
    best = ranked[0]
    return best, _reason(profile, cluster, best, ranked)


def _reason(profile: cost_model.StepProfile, cluster: cost_model.Cluster, best: cost_model.Prediction,
            ranked: Sequence[cost_model.Prediction]) -> str:
    alternatives = []
    for ranks, what in ((1, "one process per host"), (cluster.cores_per_host, "one per core")):
        shaped = [p for p in ranked if p.ranks_per_host == ranks and p is not best]
        if shaped and ranks != best.ranks_per_host:
            alternatives.append("%s %s (%s)" % (what, format(shaped[0].examples_per_sec, ",.0f"),
                                                layout_name(shaped[0])))
    runner_up = next((p for p in ranked if layout_name(p) != layout_name(best)), None)
    reason = ("%s: %d process(es) per host of %d core(s) each, %s examples/sec predicted, efficiency %.2f against "
              "one process on the same cores (a process's compute on %d core(s) is %.2fx its compute on one)"
              % (layout_name(best), best.ranks_per_host, best.threads, format(best.examples_per_sec, ",.0f"),
                 best.efficiency, best.threads,
                 1.0 / cost_model.CoreCosts(*profile.core_costs).compute_share(best.threads)))
    if alternatives:
        reason += "; %s" % "; ".join(alternatives)
    if runner_up is not None:
        reason += "; next: %s (%s examples/sec, limited by %s)" % (
            layout_name(runner_up), format(runner_up.examples_per_sec, ",.0f"), runner_up.bottleneck())
    return reason


@dataclasses.dataclass(frozen=True)
class HostLayout:
    """Where a job's processes go on each host.

    Attributes:
      strategy: the strategy they run.
      ranks_per_host: training processes per host.
      threads: TensorFlow intra- and inter-op threads of each (its vCPUs).
      prediction: the cost model's prediction of the layout.
      reason: why, for the log.
    """

    strategy: str
    ranks_per_host: int
    threads: int
    prediction: cost_model.Prediction
    reason: str

    def thread_flags(self) -> List[str]:
        """`--intra_op_threads=T --inter_op_threads=T`: the threads as `deepfm.train` flags."""
        return ["--intra_op_threads=%d" % self.threads, "--inter_op_threads=%d" % self.threads]


def for_host(strategy: str, vcpus: int, hosts: int = 1, cores: Optional[int] = None,
             link_gbps: float = DEFAULT_LINK_GBPS, profile: cost_model.StepProfile = calibrated.REFERENCE_STEP,
             transport: str = cost_model.GLOO) -> HostLayout:
    """The processes per host of `strategy` on hosts of `vcpus` vCPUs (`cores` physical cores), and why.

    Args:
      strategy: one of `cost_model.STRATEGIES`.
      vcpus: each host's vCPUs.
      hosts: hosts.
      cores: each host's physical cores (default: `vcpus`, no hyperthreads).
      link_gbps: each host's link.
      profile: the step (default: `calibrated.REFERENCE_STEP`, the default
        model at batch 1,024 on the development machine's core).
      transport: how the Horovod ranks talk (`cost_model.GLOO`, `MPI`).

    Raises:
      ValueError: an unknown strategy, or cores that do not divide the vCPUs.
    """
    cores = cores or vcpus
    if strategy not in cost_model.STRATEGIES:
        raise ValueError("strategy must be one of %s, got %r" % (", ".join(cost_model.STRATEGIES), strategy))
    if vcpus < 1 or cores < 1 or vcpus % cores:
        raise ValueError("a host of %r vCPUs on %r cores: give vCPUs >= 1 that are a multiple of the cores"
                         % (vcpus, cores))
    cluster = cost_model.Cluster(hosts=hosts, cores_per_host=cores, link_gbps=link_gbps, transport=transport)
    ranked = [p for p in predict_layouts(profile, cluster) if p.strategy == strategy]
    if not ranked:
        # A distributed strategy on one host of one core: a single rank.
        ranked = [cost_model.predict(strategy, profile, cluster.with_ranks(1))]
    best = ranked[0]
    others = [p for p in predict_layouts(profile, cluster) if p.strategy != strategy][:1]
    threads = vcpus // best.ranks_per_host
    reason = "%s on %d host(s) of %d vCPUs (%d cores): %s" % (
        strategy, hosts, vcpus, cores, _reason(profile, cluster, best, ranked))
    if others:
        reason += "; the best other strategy: %s (%s examples/sec)" % (
            layout_name(others[0]), format(others[0].examples_per_sec, ",.0f"))
    return HostLayout(strategy=strategy, ranks_per_host=best.ranks_per_host, threads=threads, prediction=best,
                      reason=reason)
