"""Compare the strategies on your own data: examples/sec and AUC side by side.

    PYTHONPATH=. python examples/compare_strategies.py data/criteo      # every strategy this machine runs
    PYTHONPATH=. python examples/compare_strategies.py data/criteo --strategies single,horovod --steps 500
    PYTHONPATH=. python examples/compare_strategies.py data/criteo -- --model dcn --embedding_size 16

(from the project root: it uses `benchmarks/`, which is not installed with
the package; the flags after `--` are `deepfm.train`'s.)

The data is a dataset root (`train/`, `validation/`, `metadata.json`, as
`dataprep.criteo` or `dataprep.synthetic` write it). Every strategy that can
run on this machine trains DeepFM (the `deepfm.train` defaults and the
dataset's sizes, changed by the flags after `--`) for `--warmup_steps` +
`--steps` steps of each training process, all at the same global batch
(per-replica batch = global batch / replicas), each in a fresh process
tree: `python -m deepfm.train`, or `python -m deepfm.launch` for the
strategies of several processes. Two replicas each: `tower` and `mirrored`
on 2 CPU devices, `ps` with 1 parameter server and 2 workers, `horovod` and
`hybrid` with 2 ranks (these two only where Horovod is installed).

It measures as `benchmarks/strategy_speed/` does, with its helpers:
examples/sec is the whole job's throughput once every training process is
past its warm-up; AUC is on the validation files after training. One run
each by default: on a machine that does other work, use `--runs 3` (the
median, then the range) before trusting a small difference. `ps` needs
steps enough for its two workers, which start seconds apart, to train at
the same time: a few hundred.
"""

import argparse
import dataclasses
import importlib.util
import os
import sys
from typing import Dict, List, Optional

from benchmarks import common
from benchmarks.strategy_speed import config as bench_config
from benchmarks.strategy_speed import measure as bench_measure
from benchmarks.strategy_speed import variants as bench_variants
from input_pipeline import schema
from jobs.local import launcher
from strategies import strategy_names

HYBRID_NOTE = "%d ranks, Gloo, tables sharded across them" % bench_variants.REPLICAS
# Horovod's ranks talk through Gloo, as the benchmark's notes say (`auto` would pick MPI where mpirun exists).
GLOO = ("--horovod_controller", "gloo")
HOROVOD_PACKAGE = "horovod"


def strategy_variants() -> List[bench_variants.Variant]:
    """One run configuration per strategy: the benchmark's, plus `hybrid`, launched like `horovod`."""
    variants = [v for v in bench_variants.all_variants() if v.group == bench_variants.GROUP_STRATEGY]
    variants = [dataclasses.replace(v, launch_flags=v.launch_flags + GLOO) if ranks(v) else v for v in variants]
    horovod = next(v for v in variants if v.strategy == strategy_names.HOROVOD)
    return variants + [dataclasses.replace(horovod, name=strategy_names.HYBRID, strategy=strategy_names.HYBRID,
                                           note=HYBRID_NOTE)]


def ranks(variant: bench_variants.Variant) -> bool:
    """Whether `variant`'s processes are Horovod ranks."""
    return variant.strategy in strategy_names.HOROVOD_RANKS


def unavailable(variant: bench_variants.Variant) -> Optional[str]:
    """Why `variant` cannot run on this machine, or None when it can."""
    if ranks(variant):
        if importlib.util.find_spec(HOROVOD_PACKAGE) is None:
            return "Horovod is not installed (pip install 'deepfm-strategies[horovod]')"
        try:
            launcher.find_horovodrun()
        except FileNotFoundError as e:
            return str(e)
    return None


def parse_args(argv=None) -> argparse.Namespace:
    """The command line: this script's flags, then `--` and `deepfm.train` flags for every run (`train_flags`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("data", help="a dataset root: train/, validation/ and metadata.json")
    parser.add_argument("--strategies", default="", help="comma-separated names (default: every one that runs here)")
    parser.add_argument("--steps", type=int, default=300, help="timed steps of every training process")
    parser.add_argument("--warmup_steps", type=int, default=50, help="steps of every training process before timing")
    parser.add_argument("--global_batch", type=int, default=bench_variants.GLOBAL_BATCH)
    parser.add_argument("--optimizer", default="lazy_adam", help="deepfm.train's --optimizer")
    parser.add_argument("--runs", type=int, default=1, help="runs of every strategy, interleaved")
    parser.add_argument("--timeout_s", type=float, default=bench_config.RUN_TIMEOUT_S, help="limit of one run")
    args = parser.parse_args(argv[:split])
    args.train_flags = tuple(argv[split + 1:])
    least_steps = 2 * bench_measure.LOG_EVERY_STEPS  # the throughput needs two progress lines after warm-up
    if args.steps < least_steps:
        parser.error("--steps must be >= %d, got %d" % (least_steps, args.steps))
    if not os.path.isfile(os.path.join(args.data, schema.METADATA_FILE)):
        parser.error("%s is not a dataset root (no metadata.json): write one with python -m dataprep.criteo "
                     "or python -m dataprep.synthetic" % args.data)
    return args


def choose(args: argparse.Namespace) -> List[bench_variants.Variant]:
    """The variants to run: those asked for (all by default) that can run here; says which are left out."""
    variants = {v.name: dataclasses.replace(v, optimizer=args.optimizer, train_flags=v.train_flags + args.train_flags)
                for v in strategy_variants()}
    names = [name for name in args.strategies.split(",") if name] or list(variants)
    unknown = sorted(set(names) - set(variants))
    if unknown:
        raise SystemExit("compare_strategies: --strategies: unknown %s; choose from %s"
                         % (", ".join(unknown), ", ".join(variants)))
    chosen = []
    for name in names:
        reason = unavailable(variants[name])
        if reason:
            print("%s is left out: %s" % (name, reason), file=sys.stderr)
        else:
            chosen.append(variants[name])
    if not chosen:
        raise SystemExit("compare_strategies: none of %s can run on this machine" % ", ".join(names))
    return chosen


def summary(values: List[float], spec: str) -> str:
    """One run's value, or the median (min-max) of several."""
    stats = common.Stats(values)
    return stats.fmt(spec) if len(values) > 1 else format(stats.median, spec)


def table(variants: List[bench_variants.Variant], results: Dict[str, List[bench_measure.RunResult]],
          failures: Dict[str, List[str]], examples: int) -> str:
    """The strategies side by side, as markdown."""
    rates = {name: common.Stats([r.examples_per_sec for r in runs]) for name, runs in results.items() if runs}
    single = rates.get(strategy_names.SINGLE)
    rows = []
    for variant in variants:
        runs = results[variant.name]
        if not runs:
            rows.append([variant.name, variant.note, "failed: see above", "", "", "", ""])
            continue
        aucs = [r.auc for r in runs if r.auc is not None]
        rows.append([
            variant.name, variant.note, summary(rates[variant.name].values, ",.0f"),
            "%.2f" % (rates[variant.name].median / single.median) if single else "n/a",
            summary(aucs, ".4f") if aucs else "n/a",
            "%.0f%%" % (100 * common.Stats([r.cpu_util for r in runs]).median),
            "%.0f" % max(r.peak_rss_mib for r in runs)])
        if failures[variant.name]:
            rows[-1][2] += " (%d failed run(s))" % len(failures[variant.name])
    return common.markdown_table(
        ["strategy", "what", "examples/sec", "x single", "AUC after %s examples" % format(examples, ","),
         "CPU util", "peak RSS MiB"], rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    variants = choose(args)
    config = bench_config.BenchmarkConfig(
        data_dir=os.path.abspath(args.data), rows=0, runs=args.runs, steps=args.steps,
        warmup_steps=args.warmup_steps, global_batch=args.global_batch, variants=tuple(variants),
        results_dir="", name="compare_strategies", timeout_s=args.timeout_s)
    # Each run prints a line to stderr as it ends; a failed run is reported, and the others go on.
    results, failures = bench_measure.measure(config)
    print(table(variants, results, failures, config.examples))
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
