"""The report of a scale-out run: medians per variant, the table, levers, traced steps, the targets; its JSON.

The efficiency column is the median over rounds of each round's ratio (the
variant against its reference measured in the same round, back to back),
steadier on a machine whose speed drifts than a ratio of medians: the
variant's examples/sec over (its training processes x its reference's,
the reference on the cores of one of its ranks), or with shared cores over
(those cores x the reference's on one of them).
"""

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks import common
from benchmarks import topology as topology_lib
from benchmarks.scale_out import layout
from benchmarks.scale_out import variants as variants_lib
from benchmarks.scale_out.config import HOSTS_LOCAL, LARGE_BATCH, BenchmarkConfig
from benchmarks.scale_out.id_capacity import ID_CAPACITY_MULTIPLE
from benchmarks.scale_out.measure import MB, RunResult, step_split
from benchmarks.scale_out.runner import STRAGGLER_GRACE_S
from benchmarks.scale_out.variants import BASELINE, ID_CAPACITY_MARGIN, INDEPENDENT, LEVER_COMPARISONS, Variant
from strategies import strategy_names as names

# The targets of the 2-host benchmark: efficiency by per-replica batch, AUC after the same examples (at most
# this far below the reference's: an AUC above it meets the target).
TARGET_EFFICIENCY = 0.90
TARGET_EFFICIENCY_SMALL_BATCH = 0.75
TARGET_AUC_DELTA = 0.002
TARGET_HYBRID_AUC_DELTA = 0.003
TRACE_SCOPES_SHOWN = 4


def target_efficiency(batch: int) -> float:
    """The efficiency target at 2 hosts for a per-replica batch."""
    return TARGET_EFFICIENCY if batch >= LARGE_BATCH else TARGET_EFFICIENCY_SMALL_BATCH


def stats(runs: Sequence[RunResult], field: str, unit: float = 1.0) -> common.Stats:
    """The `field` of every run, divided by `unit`."""
    return common.Stats([getattr(r, field) / unit for r in runs])


def median_auc(runs: Sequence[RunResult]) -> Optional[float]:
    values = [r.auc for r in runs if r.auc is not None]
    return common.Stats(values).median if values else None


def round_efficiencies(variant: Variant, runs: Sequence[RunResult],
                       baseline: Sequence[RunResult], references: Optional[int] = None) -> Optional[common.Stats]:
    """Each round's efficiency: the variant's examples/sec / (references x its reference's in the same round).

    Args:
      variant: the variant.
      runs: its runs.
      baseline: its reference's runs (one process on the cores of one of its ranks).
      references: what the reference's rate is multiplied by (default: the variant's training processes).

    Returns:
      The efficiencies; None when no round has both.
    """
    references = variant.processes if references is None else references
    reference = {r.round: r.examples_per_sec for r in baseline}
    values = [r.examples_per_sec / (references * reference[r.round]) for r in runs if r.round in reference]
    return common.Stats(values) if values else None


def summary_rows(config: BenchmarkConfig, results: Dict[str, List[RunResult]]) -> Dict[str, Dict]:
    """Per measured variant, the medians the report shows (efficiency, split, AUC delta)."""
    rows = {}
    independent = results.get(INDEPENDENT)
    independent_rate = stats(independent, "examples_per_sec").median if independent else None
    for variant in config.variants:
        runs = results.get(variant.name)
        if not runs:
            continue
        rate = stats(runs, "examples_per_sec").median
        # A lever's own single-process reference where it was measured, else `single`.
        baseline = results.get(variant.baseline) or results.get(BASELINE)
        compute_ms = stats(baseline, "cpu_ms_per_step").median if baseline else None
        efficiency = round_efficiencies(variant, runs, baseline or [], config.references(variant))
        others = [r.other_cores for r in runs if r.other_cores is not None]
        row: Dict[str, Any] = {"examples_per_sec": rate, "stats": stats(runs, "examples_per_sec"),
               "efficiency": efficiency.median if efficiency else None, "efficiency_stats": efficiency,
               "other_cores": common.Stats(others).median if others else None,
               "cpu_s_per_1k": stats(runs, "cpu_seconds_per_1k").median,
               "tx_mb_per_step": stats(runs, "tx_bytes_per_step").median / MB,
               "step_ms": stats(runs, "step_ms").median, "cpu_ms_per_step": stats(runs, "cpu_ms_per_step").median,
               "auc": median_auc(runs), "runs": len(runs),
               "vs_independent": rate / independent_rate if independent_rate and variant.processes > 1 else None}
        # A step's split needs one core of its own per training process.
        own_core = ((variant.launcher == variants_lib.LAUNCH_DIRECT and variant.cores_per_rank == 1)
                    or (variant.over_ssh and variant.cores_per_host == 1))
        row["split"] = (step_split(row["step_ms"], row["cpu_ms_per_step"], compute_ms)
                        if compute_ms is not None and variant.processes > 1 and not config.shared_cores
                        and own_core else None)
        base_auc = median_auc(baseline) if baseline else None
        row["auc_delta"] = row["auc"] - base_auc if row["auc"] is not None and base_auc is not None else None
        rows[variant.name] = row
    return rows


def report_body(config: BenchmarkConfig, results: Dict[str, List[RunResult]], failures: Dict[str, List[str]],
                load: Optional[Tuple[float, float]], traced: Optional[Dict[str, Dict]] = None,
                topology: Optional[topology_lib.Topology] = None) -> str:
    """The markdown of the report: set-up, table, levers, traced steps, target."""
    rows = summary_rows(config, results)
    table = []
    for variant in config.variants:
        failed = len(failures.get(variant.name, []))
        note = " (%d of %d runs failed)" % (failed, config.runs) if failed else ""
        stopped = sum(1 for r in results.get(variant.name, []) if r.stopped_hosts)
        if stopped:
            note += " (%d run(s): a host stopped %d s after the others, see below)" % (stopped, STRAGGLER_GRACE_S)
        row = rows.get(variant.name)
        if row is None:
            table.append([variant.name, variant.note, variant.shape(), "failed" + note] + ["n/a"] * 9)
            continue
        split = row["split"]
        table.append([
            variant.name, variant.note, variant.shape(), row["stats"].fmt() + note,
            "n/a" if row["efficiency"] is None else row["efficiency_stats"].fmt(".2f"),
            "-" if row["vs_independent"] is None else "%.2f" % row["vs_independent"],
            "%.3f" % row["cpu_s_per_1k"],
            "%.2f" % row["tx_mb_per_step"] if variant.processes > 1 else "-",
            "%.1f" % row["step_ms"],
            "%.1f / %.1f / %.1f" % split if split else "-",
            "n/a" if row["auc"] is None else "%.4f" % row["auc"],
            "n/a" if row["auc_delta"] is None else "%+.4f" % row["auc_delta"],
            "n/a" if row["other_cores"] is None else "%.2f" % row["other_cores"]])
    header = ["variant", "what", "ranks x cores", "examples/sec median (min-max)", "efficiency median (min-max)",
              "vs 2 independent singles", "CPU-s per 1k examples", "MB sent per step per process", "step ms",
              "compute / comm. CPU / waiting ms", "AUC after %s examples" % format(config.examples, ","),
              "AUC vs its single", "other load (cores)"]
    stragglers = ("A host stopped %d s after the others had finished: its training process had not exited "
                  "(the run's measurements were complete)." % STRAGGLER_GRACE_S
                  if any(r.stopped_hosts for runs in results.values() for r in runs) else "")
    sections = [setup_text(config, load), topology_text(config, topology), common.markdown_table(header, table),
                stragglers, _lever_text(rows), _trace_text(config, traced or {}), _target_text(config, rows)]
    return "\n\n".join(s for s in sections if s)


def hosts_text(config: BenchmarkConfig) -> str:
    """How the hosts were made, in words."""
    if config.hosts_mode == HOSTS_LOCAL:
        return ("hosts as blocks of this machine's cores without namespaces (`--hosts_mode local`: each host's "
                "processes pinned to its cores with `taskset`, ranks over the loopback interface, no bandwidth "
                "limit; MB sent: the machine's loopback bytes, between hosts and within them)")
    link = ("a token-bucket egress limit of %g Gbit/s per host" % config.link_gbps if config.link_gbps
            else "no bandwidth limit")
    return ("emulated hosts (`jobs.local.hosts`: a network namespace per host, veth pairs on a bridge, %s; "
            "**no latency model**: this kernel has no `netem`)" % link)


def setup_text(config: BenchmarkConfig, load: Optional[Tuple[float, float]]) -> str:
    """The set-up paragraph of the report."""
    hosts = hosts_text(config)
    return (
        "%s, %s: `single` on the cores of one rank of `algo-1`; `ps`, `horovod` and `hybrid` on `algo-1` + "
        "`algo-2` unless the variant says otherwise (ranks x cores: training processes x the cores of each). "
        "DeepFM at the defaults (embedding 32, layers 128-64-32, lazy_adam) on `%s`, per-replica batch %s%s%s; "
        "%d run(s) per variant, interleaved, each a fresh set of processes; every distributed process of a 2-process "
        "variant runs %d warm-up + %d timed steps, `single` twice as many, so every variant trains %s examples. "
        "Efficiency = examples/sec / (training processes x examples/sec of the variant's single-process reference "
        "on the cores of one of its ranks in the same round: `single`, or `single+dedup` for the `+dedup` variants "
        "where it was measured), median over rounds; vs 2 independent singles = examples/sec / that of "
        "`single_x2` (two unrelated single processes, one per host, at once: what sharing the machine alone "
        "costs). MB sent per step per process: the hosts' interface tx bytes in the timed window / steps of "
        "their training processes (ps traffic of a host counts with it). Step split (medians, ranks of one core): "
        "compute = the reference `single`'s CPU ms per step; comm. CPU = the host's CPU ms per step beyond that; "
        "waiting = the step beyond the host's CPU (its core idle). Other load: the machine's CPU in the window not "
        "used by the job (`/proc/stat`), in cores, median over rounds.%s %s"
        % (hosts[0].upper() + hosts[1:], config.layout_text(), os.path.basename(config.data_dir),
           format(config.batch, ","),
           ", every variant with `%s`" % " ".join(config.train_flags) if config.train_flags else "",
           "; `--id_capacity %d` for `+capacity` (the most distinct ids a batch of the training data sends one "
           "owner, x%g, rounded up to a multiple of %d)" % (config.id_capacity, ID_CAPACITY_MARGIN,
                                                          ID_CAPACITY_MULTIPLE) if config.id_capacity else "",
           config.runs, config.warmup_steps, config.steps, format(config.examples, ","),
           " 1-minute load average before / after: %.2f / %.2f." % tuple(load) if load else "",
           config.shared_note))


def topology_text(config: BenchmarkConfig, topology: Optional[topology_lib.Topology]) -> str:
    """The machine's topology and where the first variant of each layout ran, for the report."""
    if topology is None:
        return ""
    order = topology.order(sorted(topology.places)) if topology.known else []
    lines = ["Topology: %s." % topology.describe(sorted(topology.places) or order)]
    seen = set()
    for variant in config.variants:
        key = (variant.num_hosts, variant.cores_per_host, variant.ranks_per_host, variant.is_single)
        if key in seen or not order:
            continue
        seen.add(key)
        try:
            plan = layout.plan(variant, order, config.shared_cores)
        except ValueError:
            continue
        lines.append("- `%s` (%s): %s" % (variant.name, variant.shape(), plan.describe()))
    return "\n".join(lines)


def _trace_text(config: BenchmarkConfig, traced: Dict[str, Dict]) -> str:
    """The traced run's breakdown of each variant's first training process, as markdown."""
    table = []
    for variant in config.variants:
        processes = traced.get(variant.name) or {}
        if not processes:
            continue
        task = sorted(processes)[0]
        b = processes[task]
        tail = b["span_ms"] - b["gradients_done_ms"] if b.get("gradients_done_ms") is not None else None
        scopes = ", ".join("%s %.1f" % (scope, ms)
                           for scope, ms in list(b["op_ms_by_scope"].items())[:TRACE_SCOPES_SHOWN])
        table.append([variant.name, task, "%.1f" % b["span_ms"], "%.1f" % b["compute_ms"],
                      "%.1f" % b["exchange_only_ms"], "%.1f" % b["idle_ms"],
                      "n/a" if tail is None else "%.1f" % tail, scopes])
    if not table:
        return ""
    header = ["variant", "process", "traced step ms", "compute ms", "waiting on the exchange alone ms",
              "idle ms", "after the backward pass ms", "op ms by scope (top %d)" % TRACE_SCOPES_SHOWN]
    return ("Where a step goes (`--trace_steps %d`: one more run of each variant, its processes tracing %d steps "
            "with `deepfm.runtime.step_trace`; medians over the traced steps of the first process; tracing slows the "
            "traced steps):\n\n%s" % (config.trace_steps, config.trace_steps, common.markdown_table(header, table)))


def _lever_text(rows: Dict[str, Dict]) -> str:
    lines = ["- %s: x%.2f examples/sec, x%.2f CPU per example%s (%s vs %s)" % (
        what, rows[name]["examples_per_sec"] / rows[ref]["examples_per_sec"],
        rows[name]["cpu_s_per_1k"] / rows[ref]["cpu_s_per_1k"],
        ", x%.2f bytes per step" % (rows[name]["tx_mb_per_step"] / rows[ref]["tx_mb_per_step"])
        if rows[ref]["tx_mb_per_step"] and rows[name]["tx_mb_per_step"] else "",
        name, ref) for what, name, ref in LEVER_COMPARISONS if name in rows and ref in rows]
    return "Levers (ratios of medians):\n" + "\n".join(lines) if lines else ""


def _goal_text(config: BenchmarkConfig, row: Dict) -> str:
    """A variant's efficiency and AUC against the targets."""
    delta = row["auc_delta"]
    target = target_efficiency(config.batch)
    return "efficiency %.2f (target >= %.2f: %s); AUC %s `single`'s (%s)" % (
        row["efficiency"], target, "met" if row["efficiency"] >= target else "not met",
        "n/a vs" if delta is None else "%+.4f vs" % delta, auc_verdict(delta, TARGET_AUC_DELTA))


def auc_verdict(delta: Optional[float], tolerance: float) -> str:
    """An AUC difference against a target of at most `tolerance` below the reference."""
    return "target at most %.3f below: %s" % (
        tolerance, "n/a" if delta is None else "met" if delta >= -tolerance else "not met")


def _target_text(config: BenchmarkConfig, rows: Dict[str, Dict]) -> str:
    """The best multi-host variant at the defaults, and of every variant, against the targets."""
    measured = [v for v in config.variants
                if not v.is_single and v.name in rows and rows[v.name]["efficiency"] is not None]
    defaults = [v for v in measured if not v.train_flags and not v.env]
    if not defaults:
        return ""
    best = max(defaults, key=lambda v: rows[v.name]["efficiency"])
    text = "Target, best multi-host strategy at the defaults `%s` (per-replica batch %s%s): %s." % (
        best.name, format(config.batch, ","), ", " + " ".join(config.train_flags) if config.train_flags else "",
        _goal_text(config, rows[best.name]))
    best_measured = max(measured, key=lambda v: rows[v.name]["efficiency"])
    if best_measured is not best:
        text += " Best of every variant: `%s` (%s): %s." % (
            best_measured.name, best_measured.note, _goal_text(config, rows[best_measured.name]))
    hybrid, horovod = rows.get(names.HYBRID, {}).get("auc"), rows.get(names.HOROVOD, {}).get("auc")
    if hybrid is not None and horovod is not None:
        text += " `hybrid`'s AUC %+.4f vs `horovod`'s (%s)." % (
            hybrid - horovod, auc_verdict(hybrid - horovod, TARGET_HYBRID_AUC_DELTA))
    return text


def raw_results(config: BenchmarkConfig, results: Dict[str, List[RunResult]],
                failures: Dict[str, List[str]], traced: Optional[Dict[str, Dict]] = None,
                load: Optional[Tuple[float, float]] = None,
                topology: Optional[topology_lib.Topology] = None) -> dict:
    """The JSON of the report: the set-up (the machine's topology with it), every run and the traced runs."""
    return {
        "setup": {"batch": config.batch, "train_flags": list(config.train_flags), "id_capacity": config.id_capacity,
                  "shared_cores": config.shared_cores, "same_steps": config.same_steps, "steps": config.steps,
                  "warmup_steps": config.warmup_steps, "runs": config.runs, "warmup_rounds": config.warmup_rounds,
                  "examples": config.examples, "link_gbps": config.link_gbps,
                  "cores_per_host": config.cores_per_host, "ranks_per_host": config.ranks_per_host,
                  "hosts_mode": config.hosts_mode,
                  "data": os.path.basename(config.data_dir), "shared_note": config.shared_note,
                  "trace_steps": config.trace_steps, "load_average": list(load) if load else None,
                  "topology": topology.as_dict() if topology else None},
        "variants": {v.name: {"strategy": v.strategy, "note": v.note, "train_flags": list(v.train_flags),
                              "env": dict(v.env), "baseline": v.baseline, "hosts": v.num_hosts, "launcher": v.launcher,
                              "cores_per_host": v.cores_per_host, "ranks_per_host": v.ranks_per_host,
                              "processes": v.processes, "cores_per_rank": v.cores_per_rank,
                              "runs": [r.as_json() for r in results.get(v.name, [])],
                              "failures": failures.get(v.name, []),
                              "traces": (traced or {}).get(v.name, {})}
                     for v in config.variants},
    }


def load_results(path: str) -> Tuple[Dict[str, List[RunResult]], Dict[str, List[str]], Dict[str, Dict]]:
    """The runs, failures and traced breakdowns of a results JSON this benchmark wrote.

    Raises:
      OSError, KeyError, ValueError: not such a file.
    """
    with open(path) as f:
        variants = json.load(f)["results"]["variants"]
    results, failures, traced = {}, {}, {}
    for name, variant in variants.items():
        results[name] = [RunResult.from_json(run) for run in variant["runs"]]
        failures[name] = variant.get("failures", [])
        if variant.get("traces"):
            traced[name] = variant["traces"]
    return results, failures, traced


def load_setup(path: str) -> Dict:
    """The set-up part of a results JSON this benchmark wrote (batch, id capacity, load average, topology, ...).

    Raises:
      OSError, KeyError, ValueError: not such a file.
    """
    with open(path) as f:
        return json.load(f)["results"]["setup"]


def report_machine(report_only: Optional[str]) -> Dict[str, str]:
    """The machine a report names: the one its results JSON recorded where it is written again, else this one.

    Raises:
      OSError, ValueError: `report_only` is not a readable JSON file.
    """
    if report_only:
        with open(report_only) as f:
            recorded = json.load(f).get("machine")
        if recorded:
            return dict(recorded)
    return common.machine_info()


def write_chart(config: BenchmarkConfig, results: Dict[str, List[RunResult]]) -> Optional[str]:
    """Bars of examples/sec; the dashed line is the efficiency target x 2 x `single`."""
    shown = [v.name for v in config.variants if results.get(v.name)]
    if not shown:
        return None
    reference = None
    target = target_efficiency(config.batch)
    if results.get(BASELINE):
        reference = target * variants_lib.REFERENCE_HOSTS * config.ranks_per_host * stats(
            results[BASELINE], "examples_per_sec").median
    title = "DeepFM on emulated hosts, %d core(s) each, %d rank(s) per host, batch %s, link %s" % (
        config.cores_per_host, config.ranks_per_host, format(config.batch, ","),
        "%g Gbit/s" % config.link_gbps if config.link_gbps else "unlimited")
    return common.bar_chart(config.name, title, shown, [stats(results[n], "examples_per_sec") for n in shown],
                            "examples/sec", reference, "%.2f x %d x single" % (
                                target, variants_lib.REFERENCE_HOSTS * config.ranks_per_host),
                            results_dir=config.results_dir)

