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

import argparse
import json
import sys
import tempfile
from typing import Dict, List

from benchmarks import common

FLOOR_EXAMPLES_PER_SEC = 60_000
FLOOR_RSS_MB = 1024
WARMUP_STEPS = 50
VARIANTS = ("adam", "lazy_adam", "adagrad")


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
    return {"examples_per_sec": result.examples_per_sec, "peak_rss_mb": common.peak_rss_mb()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", default=common.DEFAULT_DATA_DIR)
    parser.add_argument("--rows", type=int, default=common.DEFAULT_ROWS)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300, help="timed steps per run, after warm-up")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--results_dir", default=common.RESULTS_DIR,
                        help="where the report goes (default: the committed benchmarks/results/)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.data_dir, args.one, args.steps)))
        return 0

    common.ensure_data(args.data_dir, args.rows, common.FEATURE_SIZE)
    variants = args.variants.split(",")
    results: Dict[str, Dict[str, List[float]]] = {v: {"examples_per_sec": [], "peak_rss_mb": []} for v in variants}
    for run in range(args.runs):
        for variant in variants:
            out = common.run_json_subprocess(
                ["-m", "benchmarks.train_single", "--data_dir", args.data_dir, "--steps", str(args.steps),
                 "--one", variant], timeout=1800)
            for key in results[variant]:
                results[variant][key].append(out[key])
            print("run %d %-10s %8.0f examples/sec  %6.0f MiB" % (
                run, variant, out["examples_per_sec"], out["peak_rss_mb"]), file=sys.stderr)

    stats = {v: common.Stats(r["examples_per_sec"]) for v, r in results.items()}
    baseline = stats[variants[0]].median
    rows = [[v, stats[v].fmt(), "%.2f" % (stats[v].median / baseline),
             "%.0f" % max(results[v]["peak_rss_mb"]),
             "yes" if stats[v].median >= FLOOR_EXAMPLES_PER_SEC and max(results[v]["peak_rss_mb"]) < FLOOR_RSS_MB
             else "no"] for v in variants]
    body = (
        "Single-device DeepFM training on %s synthetic rows (TFRecord, vectorized pipeline), batch 1024, "
        "embedding 32, layers 128-64-32, feature_size %d, 39 fields. %d runs per optimizer, each a fresh "
        "process, variants interleaved; %d warm-up steps then %d timed steps per run.\n\n"
        "Floor: %s examples/sec with under %d MiB resident.\n\n" % (
            format(args.rows, ","), common.FEATURE_SIZE, args.runs, WARMUP_STEPS, args.steps,
            format(FLOOR_EXAMPLES_PER_SEC, ","), FLOOR_RSS_MB)
        + common.markdown_table(
            ["optimizer", "examples/sec median (min-max)", "ratio to %s" % variants[0],
             "peak RSS MiB", "meets floor"], rows))
    info = common.machine_info()
    common.write_report("train_single", "Single-device training throughput", body, info, results,
                        results_dir=args.results_dir)
    common.bar_chart("train_single", "Single-device DeepFM training (%s cores)" % info["cores"], variants,
                     [stats[v] for v in variants], "examples/sec", FLOOR_EXAMPLES_PER_SEC, "floor",
                     results_dir=args.results_dir)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
