"""The strategy benchmark's `main`: every variant measured on the harness, then the report."""

import os

from benchmarks import common, harness
from benchmarks.strategy_speed.config import NAME, BenchmarkConfig
from benchmarks.strategy_speed.measure import HarnessVariant, run_results
from benchmarks.strategy_speed.report import raw_results, report_body, write_chart

PROGRAM = "benchmarks.strategy_speed"
TITLE = "Distribution strategies side by side"


def run_benchmark(config: BenchmarkConfig) -> int:
    """Measures `config`'s variants and writes the report; returns 1 if a variant failed, else 0."""
    common.ensure_data(config.data_dir, config.rows, common.FEATURE_SIZE)
    load_before = os.getloadavg()[0]
    results = harness.run([HarnessVariant(variant, config) for variant in config.selected()], config.rounds,
                          config.warmup_rounds)
    runs = run_results(results)
    body = report_body(config, runs, results.failures, (load_before, os.getloadavg()[0]))
    record = harness.machine_record()
    harness.write(results, config, NAME, TITLE, body, record,
                  chart=lambda name, results_dir: write_chart(config, runs, record),
                  extra=raw_results(runs, results.failures, config))
    print(body)
    return 1 if results.failures else 0


def main() -> None:
    """`python -m benchmarks.strategy_speed`: the flags of `BenchmarkConfig`."""
    harness.main(BenchmarkConfig, run_benchmark, program=PROGRAM)
