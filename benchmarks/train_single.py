"""Single-device training benchmark at the SageMaker sample's defaults.

    python -m benchmarks.train_single [--rows 1000000] [--runs 5] [--steps 300] [--results_dir DIR]

Trains DeepFM (batch 1024, embedding 32, layers 128-64-32, feature_size
117,581, 39 fields) on synthetic TFRecord data fed by the vectorized
pipeline, once per optimizer variant and run, each run in a fresh process,
variants interleaved. Reports examples/sec after warm-up (min/median/max over
runs) and each process's peak resident memory, and writes
`train_single.{md,json,png}` to `--results_dir` (default `benchmarks/results/`,
the committed results: a trial run names another directory).
"""

import dataclasses
import json
import tempfile

from benchmarks import common, harness
from cli import config_flags

FLOOR_EXAMPLES_PER_SEC = 60_000
FLOOR_RSS_MB = 1024
WARMUP_STEPS = 50
VARIANTS = ("adam", "lazy_adam", "adagrad")
NAME = "train_single"
METRIC = "examples_per_sec"
CHILD_TIMEOUT_S = 1800


@dataclasses.dataclass(frozen=True)
class TrainSingleConfig(harness.HarnessConfig):
    """The benchmark's options (its flags)."""

    rounds: int = config_flags.field(5, "Runs per optimizer, each a fresh process, variants interleaved.",
                                     flag="runs")
    data_dir: str = config_flags.field(common.DEFAULT_DATA_DIR, "The synthetic dataset (written when missing).")
    rows: int = config_flags.field(common.DEFAULT_ROWS, "Rows of the dataset written when missing.")
    steps: int = config_flags.field(300, "Timed steps per run, after %d warm-up steps." % WARMUP_STEPS)
    one: str = config_flags.field("", "Internal: train this optimizer in this process and print its result "
                                      "as JSON.")


@dataclasses.dataclass
class OptimizerVariant(harness.Variant):
    """One optimizer, trained in a fresh process per round."""

    name: str
    config: TrainSingleConfig

    def measure(self, round_index: int) -> harness.Measurement:
        out = common.run_json_subprocess(
            ["-m", "benchmarks.train_single", "--data_dir", self.config.data_dir, "--steps", str(self.config.steps),
             "--one", self.name], timeout=CHILD_TIMEOUT_S)
        return harness.Measurement({METRIC: out[METRIC]}, out[harness.PEAK_RSS_MB])


def run_one(data_dir: str, optimizer: str, steps: int) -> dict:
    """Trains `steps` steps in this process; returns throughput and memory."""
    import logging as std_logging

    from absl import logging

    import strategies
    from deepfm import config, job_config
    from deepfm.runtime import trainer
    from input_pipeline import files, formats, pipeline, schema

    logging.set_verbosity(logging.WARNING)
    std_logging.getLogger("tensorflow").setLevel(std_logging.ERROR)
    metadata = schema.DatasetMetadata.read(data_dir)
    with tempfile.TemporaryDirectory() as model_dir:
        train = config.TrainConfig(
            model_dir=model_dir, train_files=tuple(files.resolve([data_dir], formats.TFRECORD)),
            max_steps=WARMUP_STEPS + steps, save_checkpoints_steps=10 ** 9, log_every_n_steps=10 ** 9)
        model = config.ModelConfig(feature_size=metadata.feature_size, optimizer=optimizer)
        result = trainer.run(job_config.JobConfig(train=train, model=model,
                                                  input=pipeline.PipelineConfig(data_format=formats.TFRECORD),
                                                  strategy=strategies.StrategyConfig(name="single")))
    if result is None:
        raise RuntimeError("the single process trained without a result: it is the chief and reports one")
    return {METRIC: result.examples_per_sec, harness.PEAK_RSS_MB: common.peak_rss_mb()}


def benchmark(config: TrainSingleConfig) -> int:
    """Runs the benchmark (or, with `one`, one optimizer's run); returns the exit status."""
    if config.one:
        print(json.dumps(run_one(config.data_dir, config.one, config.steps)))
        return 0
    common.ensure_data(config.data_dir, config.rows, common.FEATURE_SIZE)
    variants = common.select_variants(config.variants or ",".join(VARIANTS),
                                      [OptimizerVariant(name, config) for name in VARIANTS])
    results = harness.run(variants, config.rounds, config.warmup_rounds)
    measured = {v: stats for v in results.names if (stats := results.stats(v, METRIC)) is not None}
    names = list(measured)
    rows = []
    for v, stats in measured.items():
        ratios = results.ratios(v, METRIC)
        peak = max(results.values[v][harness.PEAK_RSS_MB])
        rows.append([v, stats.fmt(), ratios.fmt(".2f") if ratios is not None else "-", "%.0f" % peak,
                     "yes" if stats.median >= FLOOR_EXAMPLES_PER_SEC and peak < FLOOR_RSS_MB else "no"])
    body = (
        "Single-device DeepFM training on %s synthetic rows (TFRecord, vectorized pipeline), batch 1024, "
        "embedding 32, layers 128-64-32, feature_size %d, 39 fields. %d runs per optimizer, each a fresh "
        "process, variants interleaved; %d warm-up steps then %d timed steps per run.\n\n"
        "Floor: %s examples/sec with under %d MiB resident.\n\n" % (
            format(config.rows, ","), common.FEATURE_SIZE, results.rounds_run, WARMUP_STEPS, config.steps,
            format(FLOOR_EXAMPLES_PER_SEC, ","), FLOOR_RSS_MB)
        + common.markdown_table(
            ["optimizer", "examples/sec median (min-max)", "ratio to %s per run, median (min-max)" % results.baseline,
             "peak RSS MiB", "meets floor"], rows))
    record = harness.machine_record()

    def chart(name: str, results_dir: str) -> str:
        return common.bar_chart(name, "Single-device DeepFM training (%s cores)" % record["cores"], names,
                                list(measured.values()), "examples/sec",
                                FLOOR_EXAMPLES_PER_SEC, "floor", results_dir=results_dir)

    harness.write(results, config, NAME, "Single-device training throughput", body, record,
                  chart=chart if names else None)
    print(body)
    return 1 if results.failures else 0


if __name__ == "__main__":
    harness.main(TrainSingleConfig, benchmark)
