"""The strategy benchmark's report: medians and their range, ratios, the levers, the targets, its JSON and chart."""

import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

from benchmarks import common
from benchmarks.strategy_speed.config import LOG_EVERY_STEPS, BenchmarkConfig
from benchmarks.strategy_speed.measure import RunResult
from benchmarks.strategy_speed.variants import (
    BASELINE,
    COMPUTE_CEILING,
    GROUP_CEILING,
    INPUT_CEILING,
    LEVER_COMPARISONS,
    Variant,
)

TARGET_EXAMPLES_PER_SEC = 90_000
TARGET_RSS_MIB = 1024
TARGET_CEILING_FRACTION = 0.9


def lower_ceiling(variant: Variant, stats: Dict[str, common.Stats]) -> Optional[float]:
    """min(input ceiling, compute ceiling of the variant's optimizer), medians; None if not measured."""
    compute = COMPUTE_CEILING if variant.optimizer == "adam" else COMPUTE_CEILING + "+" + variant.optimizer
    if INPUT_CEILING not in stats or compute not in stats:
        return None
    return min(stats[INPUT_CEILING].median, stats[compute].median)


def _stats(results: Dict[str, List[RunResult]], field: str) -> Dict[str, common.Stats]:
    return {name: common.Stats([getattr(r, field) for r in runs]) for name, runs in results.items() if runs}


def _ratio(value: float, reference: Optional[float]) -> str:
    return "%.2f" % (value / reference) if reference else "n/a"


def _median(values: Sequence[Optional[float]], spec: str) -> str:
    present = [v for v in values if v is not None]
    return format(common.Stats(present).median, spec) if present else "n/a"


def failure_note(failure: Optional[str]) -> str:
    """Where a variant failed, from the harness's `round N: message` ("" when it did not)."""
    if not failure:
        return ""
    return "failed in %s, not run after" % failure.split(":", 1)[0]


def report_body(config: BenchmarkConfig, results: Dict[str, List[RunResult]],
                failures: Dict[str, str], load: Tuple[float, float]) -> str:
    """The markdown of the report: setup, table, ranking, levers, targets.

    Args:
      config: what was measured.
      results: per variant name, its successful runs.
      failures: per failed variant, `round N: message` (the harness's: a
        variant that failed is not run in the later rounds).
      load: the machine's 1-minute load average before and after.
    """
    stats = _stats(results, "examples_per_sec")
    per_cpu = _stats(results, "examples_per_cpu_second")
    baseline = stats[BASELINE].median if BASELINE in stats else None
    rows = []
    for variant in config.selected():
        runs = results.get(variant.name, [])
        failed = failure_note(failures.get(variant.name))
        if not runs:
            rows.append([variant.name, variant.note, failed or "not run"] + ["n/a"] * 6)
            continue
        note = " (%s)" % failed if failed else ""
        training = variant.group != GROUP_CEILING
        ceiling = lower_ceiling(variant, stats) if training else None
        rows.append([
            variant.name, variant.note, stats[variant.name].fmt() + note,
            _ratio(stats[variant.name].median, baseline) if training else "n/a",
            _ratio(stats[variant.name].median, ceiling) if training else "n/a",
            "%.0f%%" % (100 * common.Stats([r.cpu_util for r in runs]).median),
            format(per_cpu[variant.name].median, ",.0f"),
            "%.0f (%d)" % (max(r.peak_rss_mib for r in runs), len(runs[0].processes)),
            _median([r.auc for r in runs], ".4f")])
    table = common.markdown_table(
        ["variant", "what", "examples/sec median (min-max)", "ratio to single", "ratio to lower ceiling",
         "CPU util", "examples per CPU-second", "peak RSS MiB/process (processes)",
         "AUC after %s examples" % format(config.examples, ",")],
        rows)
    sections = [_setup_text(config, load), table, _ceiling_text(stats), _ranking_text(config, stats),
                _lever_text(stats, per_cpu), _target_text(config, results, stats)]
    return "\n\n".join(s for s in sections if s)


def _setup_text(config: BenchmarkConfig, load: Tuple[float, float]) -> str:
    return (
        "DeepFM (embedding 32, layers 128-64-32, dropout 0.5, feature_size from the data, 39 fields) on the "
        "synthetic dataset `%s` (TFRecord, vectorized pipeline), the same global batch of %d in every variant "
        "(per-replica batch = global / replicas). %d run(s) per variant, each a fresh process tree, variants "
        "interleaved; each training process runs %d warm-up steps, then %d timed steps. examples/sec: the "
        "job's throughput in the window where every training process is past warm-up (sum over processes; "
        "see the package docstring of `benchmarks/strategy_speed/`); CPU util: CPU seconds of the whole process "
        "tree in that window / wall seconds / %d cores; examples per CPU-second: the examples of the window / the "
        "tree's CPU seconds in it; peak RSS: the largest process of the job, with the "
        "number of processes in its tree (launchers, parameter servers, workers, ranks); AUC on the "
        "validation split after %s training examples in every variant. Ratio to lower ceiling: median / "
        "min(input ceiling, compute ceiling with the variant's optimizer). 1-minute load average before / "
        "after the benchmark: %.2f / %.2f (other work on the machine lowers the CPU share of the runs)."
        % (os.path.basename(config.data_dir), config.global_batch, config.rounds, config.warmup_steps, config.steps,
           os.cpu_count() or 1, format(config.examples, ","), load[0], load[1]))


def _ceiling_text(stats: Dict[str, common.Stats]) -> str:
    names = [n for n in (INPUT_CEILING, COMPUTE_CEILING, COMPUTE_CEILING + "+lazy_adam") if n in stats]
    if not names:
        return ""
    return "Ceilings (medians): " + "; ".join("%s %s examples/sec" % (n, format(stats[n].median, ",.0f"))
                                              for n in names) + "."


def _ranking_text(config: BenchmarkConfig, stats: Dict[str, common.Stats]) -> str:
    trained = [v.name for v in config.selected() if v.group != GROUP_CEILING and v.name in stats]
    ranked = sorted(trained, key=lambda name: -stats[name].median)
    return "Ranking by median examples/sec: " + " > ".join(
        "%s (%s)" % (name, format(stats[name].median, ",.0f")) for name in ranked) + "." if ranked else ""


def _lever_text(stats: Dict[str, common.Stats], per_cpu: Dict[str, common.Stats]) -> str:
    lines = ["- %s: x%.2f examples/sec, x%.2f examples per CPU-second (%s vs %s)" % (
        what, stats[name].median / stats[reference].median, per_cpu[name].median / per_cpu[reference].median,
        name, reference) for what, name, reference in LEVER_COMPARISONS if name in stats and reference in stats]
    return "Levers (ratios of medians):\n" + "\n".join(lines) if lines else ""


def _target_text(config: BenchmarkConfig, results: Dict[str, List[RunResult]],
                 stats: Dict[str, common.Stats]) -> str:
    trained = [v for v in config.selected() if v.group != GROUP_CEILING and v.name in stats]
    if not trained:
        return ""
    best = max(trained, key=lambda v: stats[v.name].median)
    rate = stats[best.name].median
    rss = max(r.peak_rss_mib for r in results[best.name])
    ceiling = lower_ceiling(best, stats)
    fraction = rate / ceiling if ceiling else None
    return (
        "Targets, best variant `%s`: %s examples/sec (target >= %s: %s); peak RSS %.0f MiB per process "
        "(target < %d: %s); %s of the lower ceiling (target >= %.0f%%: %s)." % (
            best.name, format(rate, ",.0f"), format(TARGET_EXAMPLES_PER_SEC, ","),
            "met" if rate >= TARGET_EXAMPLES_PER_SEC else "not met", rss, TARGET_RSS_MIB,
            "met" if rss < TARGET_RSS_MIB else "not met",
            "%.0f%%" % (100 * fraction) if fraction is not None else "n/a", 100 * TARGET_CEILING_FRACTION,
            "n/a" if fraction is None else "met" if fraction >= TARGET_CEILING_FRACTION else "not met"))


def raw_results(results: Dict[str, List[RunResult]], failures: Dict[str, str], config: BenchmarkConfig) -> dict:
    """What the report's JSON holds beside the harness's keys: the setup, and every variant with its runs."""
    return {
        "setup": {"global_batch": config.global_batch, "steps": config.steps, "warmup_steps": config.warmup_steps,
                  "runs": config.rounds, "examples": config.examples, "data_dir": os.path.basename(config.data_dir),
                  "log_every_n_steps": LOG_EVERY_STEPS},
        "variants": {
            v.name: {"group": v.group, "note": v.note, "kind": v.kind, "strategy": v.strategy,
                     "replicas": v.replicas, "processes": v.processes, "optimizer": v.optimizer,
                     "per_replica_batch": v.per_replica_batch(config.global_batch),
                     "train_flags": list(v.train_flags), "launch_flags": list(v.launch_flags), "env": dict(v.env),
                     "runs": [dataclasses.asdict(r) for r in results.get(v.name, [])],
                     "failure": failures.get(v.name)}
            for v in config.selected()},
    }


def write_chart(config: BenchmarkConfig, results: Dict[str, List[RunResult]], info: Dict[str, str]) -> str:
    """The bar chart of every measured variant but the input ceiling, whose bar would dwarf the rest."""
    shown = [v.name for v in config.selected() if results[v.name] and v.name != INPUT_CEILING]
    title = "DeepFM training, global batch %d, %s cores" % (config.global_batch, info["cores"])
    if results.get(INPUT_CEILING):
        title += "; input ceiling %s/s" % format(
            common.Stats([r.examples_per_sec for r in results[INPUT_CEILING]]).median, ",.0f")
    return common.bar_chart(config.name, title, shown,
                            [common.Stats([r.examples_per_sec for r in results[n]]) for n in shown],
                            "examples/sec", TARGET_EXAMPLES_PER_SEC, "target", results_dir=config.results_dir)
