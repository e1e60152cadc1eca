"""The strategy benchmark's flags and `main`: measure, then write the report."""

import argparse
import os
import sys
from typing import Optional, Sequence

import benchmarks.strategy_speed
from benchmarks import common
from benchmarks.strategy_speed.ceilings import run_child
from benchmarks.strategy_speed.config import (
    DEFAULT_RUNS,
    DEFAULT_STEPS,
    DEFAULT_WARMUP_STEPS,
    NAME,
    QUICK_NAME,
    QUICK_STEPS,
    QUICK_WARMUP_STEPS,
    RUN_TIMEOUT_S,
    BenchmarkConfig,
)
from benchmarks.strategy_speed.measure import LOG_EVERY_STEPS, measure
from benchmarks.strategy_speed.report import raw_results, report_body, write_chart
from benchmarks.strategy_speed.variants import CHILD_KINDS, GLOBAL_BATCH, all_variants


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=benchmarks.strategy_speed.__doc__.split("\n")[0])
    parser.add_argument("--data_dir", default=common.DEFAULT_DATA_DIR)
    parser.add_argument("--rows", type=int, default=common.DEFAULT_ROWS, help="rows of a generated dataset")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--steps", type=int, default=None, help="timed steps per training process (default %d)"
                        % DEFAULT_STEPS)
    parser.add_argument("--warmup_steps", type=int, default=None, help="default %d" % DEFAULT_WARMUP_STEPS)
    parser.add_argument("--batch_size", type=int, default=GLOBAL_BATCH, help="global batch")
    parser.add_argument("--variants", default="", help="comma-separated variant names (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: %d warm-up + %d timed steps, 1 run, report named %s"
                        % (QUICK_WARMUP_STEPS, QUICK_STEPS, QUICK_NAME))
    parser.add_argument("--results_dir", default=common.RESULTS_DIR)
    parser.add_argument("--timeout_s", type=float, default=RUN_TIMEOUT_S, help="limit of one run of a variant")
    parser.add_argument("--optimizer", default="adam", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=CHILD_KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--child_output", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def make_config(args: argparse.Namespace) -> BenchmarkConfig:
    """The `BenchmarkConfig` of the parsed arguments.

    Raises:
      ValueError: a bad argument; the message names it and its value.
    """
    variants = tuple(common.select_variants(args.variants, all_variants()))
    steps = args.steps if args.steps is not None else QUICK_STEPS if args.quick else DEFAULT_STEPS
    warmup = (args.warmup_steps if args.warmup_steps is not None
              else QUICK_WARMUP_STEPS if args.quick else DEFAULT_WARMUP_STEPS)
    runs = 1 if args.quick else args.runs
    for flag, value, least in (("runs", runs, 1), ("steps", steps, 2 * LOG_EVERY_STEPS),
                               ("warmup_steps", warmup, 0), ("batch_size", args.batch_size, 1),
                               ("timeout_s", args.timeout_s, 1)):
        if value < least:
            raise ValueError("--%s must be >= %d, got %r" % (flag, least, value))
    too_small = [v.name for v in variants if args.batch_size < v.replicas]
    if too_small:
        raise ValueError("--batch_size %d is smaller than the replicas of %s" % (args.batch_size, ", ".join(too_small)))
    return BenchmarkConfig(
        data_dir=os.path.abspath(args.data_dir), rows=args.rows, runs=runs, steps=steps, warmup_steps=warmup,
        global_batch=args.batch_size, variants=variants, results_dir=args.results_dir,
        name=QUICK_NAME if args.quick else NAME, timeout_s=args.timeout_s)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.child:
        run_child(args)
        return 0
    try:
        config = make_config(args)
    except ValueError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    common.ensure_data(config.data_dir, config.rows, common.FEATURE_SIZE)
    load_before = os.getloadavg()[0]
    results, failures = measure(config)
    body = report_body(config, results, failures, (load_before, os.getloadavg()[0]))
    info = common.machine_info()
    common.write_report(config.name, "Distribution strategies side by side", body, info,
                        raw_results(results, failures, config), results_dir=config.results_dir)
    write_chart(config, results, info)
    print(body)
    return 1 if any(failures.values()) else 0
