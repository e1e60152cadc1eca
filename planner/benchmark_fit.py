"""The cost model against benchmark results: reading them, fitting its costs to them, checking its predictions.

`deepfm.advise`'s `--fit_to`, `--fit_mpi_to`, `--fit_cores_to` and
`--check_against`. Reads `benchmarks.scale_out` results (variants of 2
hosts; hosts of `setup.cores_per_host`) and `benchmarks.multicore` results
(entries, each with its layout and reference). A run's step beyond its
reference's compute and its bytes' time on the link is what its strategy's
`cost_model.StepCosts` are fitted to (`planner.cost_fit.calibrate`); what further
cores give (`cost_model.CoreCosts`) is fitted to `benchmarks.multicore`'s
runs on one and several cores. Runs at another per-replica batch than the
measured step's are read with that batch's distinct ids.
This module imports no TensorFlow.
"""

import dataclasses
import json
import os
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from deepfm import config as config_lib
from planner import calibrated, cost_fit, cost_model

# The costs of a distributed step beyond compute and the link, and what a process's further cores give, as
# fitted to FITTED_TO and CORES_FITTED_TO (`planner.calibrated`).
FITTED_TO = calibrated.FITTED_TO
CALIBRATED_COSTS = calibrated.STEP_COSTS
CORES_FITTED_TO = calibrated.CORES_FITTED_TO
CALIBRATED_CORE_COSTS = calibrated.CORE_COSTS
DEDUP_FLAG = "--dedup_lookups"
FP16_EXCHANGE_FLAG = "--exchange_fp16"
SINGLE_VARIANT = "single"
SPARSE_AS_DENSE_FLAG = "--sparse_as_dense"
# The benchmark variants each strategy's costs are fitted to. Horovod's and the parameter servers' have two
# byte counts at each batch; the hybrid strategy's all-to-alls share Horovod's transport and its cost per byte.
FIT_VARIANTS = {cost_model.HOROVOD: ("horovod", "horovod+dedup"), cost_model.PS: ("ps", "ps+dedup"),
                cost_model.HYBRID: ("hybrid", "hybrid+fp16")}
# The variants the costs over MPI with yielding waits are fitted to (`--fit_mpi_to`), by the key of their costs.
FIT_MPI_VARIANTS = {cost_model.costs_key(cost_model.HYBRID, cost_model.MPI): ("hybrid+mpi_yield",),
                    cost_model.costs_key(cost_model.HOROVOD, cost_model.MPI): ("horovod+mpi_yield",
                                                                               "horovod+dedup+mpi_yield")}
MPI_FITTED_TO = calibrated.MPI_FITTED_TO
# How a benchmark's ranks were started (`benchmarks.scale_out`'s `Variant.launcher`, `benchmarks.multicore`'s
# entries): each rank in its host without a launcher (Gloo), or by horovodrun or mpirun over MPI with waits that
# yield their core; MPI with spinning waits is a transport the cost model does not model.
GLOO_LAUNCHERS = ("direct", "gloo")
MPI_YIELD_LAUNCHERS = ("mpi_yield", "ssh_mpi_yield")
# Results written before the launcher was recorded say it in the variant's note or the entry's key.
MPI_YIELD_NOTE = "mpi_yield_when_idle 1"
MPI_ENTRY_SUFFIX = ", MPI"


def _transport_of(variant: dict, name: str) -> Optional[str]:
    """How a measured run's ranks talked (`cost_model.GLOO` or `MPI`); None: MPI with spinning waits."""
    launcher = variant.get("launcher")
    if launcher is None:
        if MPI_YIELD_NOTE in variant.get("note", "") or name.endswith(MPI_ENTRY_SUFFIX):
            return cost_model.MPI
        return None if "+mpi" in name else cost_model.GLOO
    if launcher in MPI_YIELD_LAUNCHERS:
        return cost_model.MPI
    return cost_model.GLOO if launcher in GLOO_LAUNCHERS else None


def _strategy_of(variant: dict) -> str:
    if variant["strategy"] == "ps":
        return cost_model.PS
    if variant["strategy"] == cost_model.HYBRID:
        return cost_model.HYBRID
    return cost_model.HOROVOD_DENSE if SPARSE_AS_DENSE_FLAG in variant["train_flags"] else cost_model.HOROVOD


def _median(values):
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else 0.5 * (values[middle - 1] + values[middle])


def _read(path: str) -> Dict:
    with open(path) as f:
        return json.load(f)["results"]


def _batch(run: Dict, setup: Dict) -> int:
    return run.get("batch", setup.get("batch", config_lib.DEFAULT_BATCH_SIZE))


def result_batches(paths: Sequence[str]) -> List[int]:
    """The per-replica batches of each results JSON (`benchmarks.scale_out`'s setup, `benchmarks.multicore`'s runs)."""
    batches = []
    for path in paths:
        results = _read(path)
        if "entries" in results:
            batches.extend(sorted({_batch(entry, results["setup"]) for entry in results["entries"].values()}))
        else:
            batches.append(_batch({}, results["setup"]))
    return batches


def profile_at(profile: cost_model.StepProfile, batch: int,
               distinct_ids: Mapping[int, float]) -> cost_model.StepProfile:
    """`profile` at another per-replica batch, with that batch's distinct ids (`distinct_ids[batch]`).

    Raises:
      ValueError: no distinct ids counted at `batch`.
    """
    if batch == profile.batch_size:
        return profile
    if batch not in distinct_ids:
        raise ValueError("no distinct ids counted at a per-replica batch of %d (this step is at %d)"
                         % (batch, profile.batch_size))
    fields = profile.ids_per_step // profile.batch_size
    return dataclasses.replace(profile, batch_size=batch, ids_per_step=batch * fields,
                               distinct_ids_per_step=distinct_ids[batch])


class Measured(NamedTuple):
    """A distributed run of a benchmark's results: what the cost model needs of it.

    Attributes:
      variant: its entry in the results JSON.
      strategy: the cost model's strategy.
      cluster: its layout: hosts, cores per host, processes per host, the link.
      profile: the step: the run's batch, its reference's compute on the
        cores of one of its ranks (`compute_at(cluster.threads)`), its rows' options.
      beyond_s: median seconds its step took beyond that compute and its bytes' time on the link.
      handled_bytes: the bytes a process handles per step (`cost_model.traffic`).
    """

    variant: dict
    strategy: str
    cluster: cost_model.Cluster
    profile: cost_model.StepProfile
    beyond_s: float
    handled_bytes: float


def _runs_of(results: Dict) -> Dict[str, Tuple[dict, Optional[dict], int, int, int, int]]:
    """Per distributed run: (its entry, its reference's entry, batch, hosts, cores per host, processes per host).

    Reads `benchmarks.scale_out` results (variants; hosts of `setup.cores_per_host`, 1 before it was
    recorded) and `benchmarks.multicore` results (entries, each with its layout and reference).
    """
    setup = results["setup"]
    found = {}
    if "entries" in results:
        entries = results["entries"]
        for key, entry in entries.items():
            if entry["strategy"] == "single" or not entry["runs"]:
                continue
            reference = entries.get(entry.get("reference", ""))
            if reference is None:
                # Transcribed figures name no reference: single at the batch on the cores of one rank.
                per_rank = entry["cores_per_host"] // entry["ranks_per_host"]
                reference = next((e for e in entries.values() if e["strategy"] == "single" and
                                  e["batch"] == entry["batch"] and e["cores_per_host"] == per_rank), None)
            found[key] = (entry, reference, entry["batch"], entry["hosts"], entry["cores_per_host"],
                          entry["ranks_per_host"])
        return found
    variants = results["variants"]
    for name, variant in variants.items():
        if variant["strategy"] == "single" or not variant["runs"]:
            continue
        reference = variants.get(variant["baseline"]) if variant["baseline"] in variants else None
        if not reference or not reference["runs"]:
            reference = variants.get(SINGLE_VARIANT)
        found[name] = (variant, reference, _batch({}, setup), variant.get("hosts", 2),
                       variant.get("cores_per_host", setup.get("cores_per_host", 1)),
                       variant.get("ranks_per_host", setup.get("ranks_per_host", 1)))
    return found


def measured_variants(path: str, profile: cost_model.StepProfile, distinct_ids: Mapping[int, float]
                      ) -> Dict[str, Measured]:
    """`{name: Measured}` of every distributed run with runs and a measured reference in a results JSON.

    Compute = the run's reference single process's (on the cores of one
    of its ranks) median wall ms per step; rows follow its `--dedup_lookups`
    and `--exchange_fp16`; hosts without a bandwidth limit get
    `cost_model.DEFAULT_UNLIMITED_GBPS`.

    Raises:
      ValueError: the run's batch is not `profile`'s and has no distinct ids counted.
    """
    results = _read(path)
    link_gbps = results["setup"].get("link_gbps") or cost_model.DEFAULT_UNLIMITED_GBPS
    measured = {}
    for name, (variant, reference, batch, hosts, cores, ranks) in _runs_of(results).items():
        transport = _transport_of(variant, name)
        if not reference or not reference["runs"] or transport is None:
            continue
        cluster = cost_model.Cluster(hosts=hosts, cores_per_host=cores, link_gbps=link_gbps, latency_s=0.0,
                                     ranks_per_host=ranks, transport=transport)
        at_batch = profile_at(profile, batch, distinct_ids)
        share = cost_model.CoreCosts(*at_batch.core_costs).compute_share(cluster.threads)
        step = dataclasses.replace(
            at_batch, compute_s=_median([r["step_ms"] for r in reference["runs"]]) / 1000.0 / share,
            dedup=DEDUP_FLAG in variant["train_flags"], exchange_fp16=FP16_EXCHANGE_FLAG in variant["train_flags"])
        strategy = _strategy_of(variant)
        link_bytes, handled, _ = cost_model.traffic(strategy, step, cluster)
        beyond = (_median([r["step_ms"] for r in variant["runs"]]) / 1000.0 - step.compute_at(cluster.threads)
                  - link_bytes / cluster.link_bytes_per_s)
        measured[name] = Measured(variant, strategy, cluster, step, beyond, handled)
    return measured


def fit(paths: Sequence[str], profile: cost_model.StepProfile,
        distinct_ids: Mapping[int, float]) -> cost_model.StepProfile:
    """`profile` with its step costs fitted to scale-out benchmarks' results.

    Each strategy's costs are fitted to its `FIT_VARIANTS` in every file,
    at one core per process (`planner.cost_fit.calibrate`); the hybrid strategy's
    take Horovod's cost per byte.

    Raises:
      ValueError: fewer than two configurations of a strategy's variants in all the files.
    """
    found: Dict[str, List[Measured]] = {strategy: [] for strategy in FIT_VARIANTS}
    for path in paths:
        measured = measured_variants(path, profile, distinct_ids)
        for strategy, names in FIT_VARIANTS.items():
            found[strategy] += [measured[name] for name in names if name in measured
                                and measured[name].cluster.threads == 1
                                and measured[name].cluster.transport == cost_model.GLOO]
    costs: Dict[str, cost_model.StepCosts] = {}
    for strategy in (cost_model.HOROVOD, cost_model.PS, cost_model.HYBRID):
        runs = found[strategy]
        if len(runs) < 2:
            raise ValueError("%s: %d run(s) of %s, and the fit needs two (two byte counts, or two batches)"
                             % (", ".join(paths), len(runs), " or ".join(FIT_VARIANTS[strategy])))
        costs[strategy] = cost_fit.calibrate(
            [m.handled_bytes for m in runs], [m.profile.compute_s for m in runs], [m.beyond_s for m in runs],
            cpu_s_per_byte=costs[cost_model.HOROVOD].cpu_s_per_byte if strategy == cost_model.HYBRID else None)
    costs.update({key: value for key, value in profile.step_costs.items() if key not in costs})
    return dataclasses.replace(profile, step_costs=costs)


def fit_mpi(paths: Sequence[str], profile: cost_model.StepProfile,
            distinct_ids: Mapping[int, float]) -> cost_model.StepProfile:
    """`profile` with its costs over MPI with yielding waits fitted to scale-out results (`FIT_MPI_VARIANTS`).

    Fitted as `fit` fits a strategy's costs over Gloo, at one core per
    process, with the strategy's cost per byte over Gloo (the rows are
    serialized and applied the same way; the transport changes what a
    step waits and spins). A strategy none of whose variants ran in the
    files keeps the costs `profile` has.

    Raises:
      ValueError: one configuration of a strategy's variants in all the
        files (the fit needs two), or no strategy's variants at all.
    """
    costs = dict(profile.step_costs)
    fitted = 0
    for key, names in FIT_MPI_VARIANTS.items():
        strategy = key.split(cost_model.TRANSPORT_SEPARATOR)[0]
        runs: List[Measured] = []
        for path in paths:
            measured = measured_variants(path, profile, distinct_ids)
            runs += [measured[name] for name in names if name in measured and measured[name].cluster.threads == 1
                     and measured[name].cluster.transport == cost_model.MPI]
        if not runs:
            continue
        if len(runs) < 2:
            raise ValueError("%s: %d run(s) of %s, and the fit needs two (two batches)"
                             % (", ".join(paths), len(runs), " or ".join(names)))
        costs[key] = cost_fit.calibrate(
            [m.handled_bytes for m in runs], [m.profile.compute_s for m in runs], [m.beyond_s for m in runs],
            cpu_s_per_byte=profile.costs(strategy).cpu_s_per_byte)
        fitted += 1
    if not fitted:
        raise ValueError("%s: no run of %s over MPI with yielding waits to fit" % (
            ", ".join(paths), " or ".join(name for names in FIT_MPI_VARIANTS.values() for name in names)))
    return dataclasses.replace(profile, step_costs=costs)


def core_points(paths: Sequence[str], step_costs: Mapping[str, cost_model.StepCosts] = CALIBRATED_COSTS
                ) -> Tuple[List[Tuple[int, float]], List[Tuple[int, float]]]:
    """What `benchmarks.multicore` results say of a process's further cores.

    Returns:
      `(speed-ups, exchange ratios)`: per single run on T > 1 cores, `(T,
      its examples/sec over single on one core's at its batch)`; per
      distributed run at T > 1 cores per rank with the same strategy, hosts
      and batch measured at one core per rank, `(T, the exchange's cost at
      T over its cost at one)`, the exchange's cost being what the step
      took beyond its reference's step and the share of it that grows
      with the compute (`step_costs`' compute factor).
    """
    speedups, ratios = [], []
    for path in paths:
        entries = _read(path)["entries"]

        def rate(result):
            return _median([r["examples_per_sec"] for r in result["runs"]])

        singles = {(e["batch"], e["cores_per_host"] // e["ranks_per_host"]): e for e in entries.values()
                   if e["strategy"] == "single" and e["runs"]}
        for (batch, threads), single in singles.items():
            if threads > 1 and (batch, 1) in singles:
                speedups.append((threads, rate(single) / rate(singles[(batch, 1)])))
        # The spread is fitted over Gloo, the transport the figures measured.
        gloo = {key: e for key, e in entries.items() if _transport_of(e, key) == cost_model.GLOO}
        for result in gloo.values():
            threads = result["cores_per_host"] // result["ranks_per_host"]
            if result["strategy"] == "single" or threads == 1 or not result["runs"]:
                continue
            one = next((e for e in gloo.values() if e["strategy"] == result["strategy"] and e["runs"] and
                        e["hosts"] == result["hosts"] and e["batch"] == result["batch"] and
                        e["ranks_per_host"] == result["ranks_per_host"] and e["cores_per_host"] == e["ranks_per_host"]),
                       None)
            if one is None or (result["batch"], threads) not in singles or (result["batch"], 1) not in singles:
                continue
            factor = cost_model.StepCosts(*step_costs.get(_strategy_of(result), step_costs.get(
                cost_model.HOROVOD, cost_model.StepCosts()))).compute_factor
            exchange = []
            for run, cores in ((result, threads), (one, 1)):
                compute = _median([r["step_ms"] for r in singles[(run["batch"], cores)]["runs"]])
                exchange.append(_median([r["step_ms"] for r in run["runs"]]) - compute * (1.0 + factor))
            if exchange[1] > 0:
                ratios.append((threads, exchange[0] / exchange[1]))
    return speedups, ratios


def fit_cores(paths: Sequence[str], step_costs: Mapping[str, cost_model.StepCosts] = CALIBRATED_COSTS
              ) -> cost_model.CoreCosts:
    """The `cost_model.CoreCosts` that fit `benchmarks.multicore` results (`core_points`).

    Raises:
      ValueError: no single run on more than one core with one on a core to compare, or no distributed
        run at more cores per rank with its one-core counterpart.
    """
    speedups, ratios = core_points(paths, step_costs)
    if not speedups:
        raise ValueError("%s: no single run on several cores beside one on one core at the same batch"
                         % ", ".join(paths))
    if not ratios:
        raise ValueError("%s: no distributed run at several cores per rank beside the same at one core per rank "
                         "(benchmarks.multicore --one_vcpu_hosts)" % ", ".join(paths))
    return cost_model.CoreCosts(serial_fraction=cost_fit.fit_serial_fraction(speedups),
                                exchange_spread=cost_fit.fit_exchange_spread(ratios))


def check(paths: Sequence[str], profile: cost_model.StepProfile, distinct_ids: Mapping[int, float]) -> str:
    """Predictions with `profile`'s costs next to each distributed run measured in `paths`, as markdown."""
    lines = ["| run | batch | variant | hosts x processes x cores | predicted examples/sec | measured | error "
             "| predicted MB/step on the link | measured tx MB/step |", "|---|---|---|---|---|---|---|---|---|"]
    for path in paths:
        for name, m in measured_variants(path, profile, distinct_ids).items():
            step = dataclasses.replace(m.profile, step_costs=profile.step_costs)
            prediction = cost_model.predict(m.strategy, step, m.cluster)
            rate = _median([r["examples_per_sec"] for r in m.variant["runs"]])
            tx = [r["tx_bytes_per_step"] for r in m.variant["runs"] if "tx_bytes_per_step" in r]
            lines.append("| %s | %s | %s | %dx%dx%d | %s | %s | %+.0f%% | %.2f | %s |" % (
                os.path.splitext(os.path.basename(path))[0], format(step.batch_size, ","), name,
                m.cluster.hosts, m.cluster.ranks, m.cluster.threads, format(prediction.examples_per_sec, ",.0f"),
                format(rate, ",.0f"), 100 * cost_model.relative_error(prediction.examples_per_sec, rate),
                prediction.link_bytes / 1e6, "%.2f" % (_median(tx) / 1e6) if tx else "n/a"))
    return "\n".join(lines) + "\n"
