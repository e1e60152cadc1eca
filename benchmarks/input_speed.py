"""Input-pipeline benchmark: examples/sec of the tf.data pipeline alone.

    python -m benchmarks.input_speed [--runs 3] [--batches 500] [--quick]
        [--data_dir data/synthetic] [--variants tfrecord,libsvm,...] [--results_dir DIR]

Iterates the batches of `input_pipeline.pipeline.DatasetBuilder` (batch
1024) the way `tf.estimator` does, in graph mode: an initializable iterator
and a session loop. Each step runs an op that depends on the iterator's next
batch, so the batch is made but not copied into Python; nothing else runs.

The rows, measured side by side in one run, variants interleaved round by
round, each measured run in a fresh process:

* the default (vectorized: batch, then decode) pipeline on TFRecord and on
  LibSVM, and each with the scalar decode (`scalar_map`: decode, then batch);
  the default pipeline on packed TFRecord (each record decoded, its rows
  rebatched);
* no prefetch (`no_prefetch`) against the default prefetch;
* Pipe mode: `PipeFeeder` (in the parent process, as SageMaker's agent is a
  process of its own) streams the same TFRecord files through a real FIFO to
  `PipeModeDataset`, read by the builder in Pipe mode (base directory in a
  temporary directory);
* `num_parallel_reads` 1, 4 and 8 on the same rows split into 8 files (each
  TFRecord shard cut in two at a record boundary): with the 4 shards alone
  8 parallel reads are capped at 4 files;
* caching over several epochs of one shard: none, `cache("memory")` before
  repeat, and after repeat (`cache_after_repeat`), with the resident memory
  after each epoch; their first epoch (which fills the cache) is the
  warm-up;
* reference pipelines built here, to show what the builder's own work costs:
  a bare `TFRecordDataset(files)` -> batch -> parse, and the builder's
  chunked interleave without the damaged-file accounting; and each decoder
  alone on one cached batch.

The builder makes only the recommended order; the slow orders the
best-practice text warns against (`scalar_map`, `no_prefetch`,
`cache_after_repeat`) are built by the benchmark
(`input_speed_variants.slow_order_dataset`), from the builder's sharded
records and its batch decoder.

Reports examples/sec (min/median/max over runs, warm-up batches excluded),
CPU microseconds per example (all threads of the process) and peak resident
memory, checks the targets (`input_speed_report`), and writes
`benchmarks/results/input_pipeline.{md,json,png}`.

This module is the command and the measurement: the rows and their datasets
are `benchmarks.input_speed_variants`, the report
`benchmarks.input_speed_report`.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

from benchmarks import common
from benchmarks.input_speed_report import write_outputs
from benchmarks.input_speed_variants import (
    FILES_SPLIT,
    PIPE_CHANNEL,
    REFERENCE,
    SPLIT_PARTS,
    VARIANTS_BY_NAME,
    BenchConfig,
    build_dataset,
    planned_epochs,
    split_tfrecords,
    train_files,
)
from input_pipeline import files, formats

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BATCH_SIZE = 1024
CHILD_TIMEOUT_S = 900
MIB = float(1 << 20)
MICROSECONDS = 1e6

# Defaults of a full run and of --quick.
FULL_RUNS, FULL_BATCHES, FULL_WARMUP, FULL_CACHE_EPOCHS = 3, 500, 50, 4
QUICK_RUNS, QUICK_BATCHES, QUICK_WARMUP, QUICK_CACHE_EPOCHS = 1, 20, 5, 3


def parse_args(argv: Optional[Sequence[str]] = None) -> BenchConfig:
    """Parses the command line into a `BenchConfig` (see `--help`).

    Raises:
      SystemExit: a bad flag value (argparse's usage error names it).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", default=common.DEFAULT_DATA_DIR, help="dataset root with metadata.json")
    parser.add_argument("--runs", type=int, help="measured runs per variant (default %d; --quick %d)"
                        % (FULL_RUNS, QUICK_RUNS))
    parser.add_argument("--batches", type=int, help="timed batches per run (default %d; --quick %d)"
                        % (FULL_BATCHES, QUICK_BATCHES))
    parser.add_argument("--warmup", type=int, help="warm-up batches, not timed (default %d; --quick %d)"
                        % (FULL_WARMUP, QUICK_WARMUP))
    parser.add_argument("--cache_epochs", type=int, help="epochs of the cache rows (default %d; --quick %d)"
                        % (FULL_CACHE_EPOCHS, QUICK_CACHE_EPOCHS))
    parser.add_argument("--batch_size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument("--variants", default=",".join(VARIANTS_BY_NAME),
                        help="comma-separated rows; %r is always measured" % REFERENCE)
    parser.add_argument("--quick", action="store_true", help="a short run (smaller defaults)")
    parser.add_argument("--results_dir", default=common.RESULTS_DIR)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--split_dir", help=argparse.SUPPRESS)
    parser.add_argument("--pipe_base_dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {"runs": QUICK_RUNS if quick else FULL_RUNS, "batches": QUICK_BATCHES if quick else FULL_BATCHES,
                "warmup": QUICK_WARMUP if quick else FULL_WARMUP,
                "cache_epochs": QUICK_CACHE_EPOCHS if quick else FULL_CACHE_EPOCHS}
    values = {key: getattr(args, key) if getattr(args, key) is not None else default
              for key, default in defaults.items()}
    minimum = {"runs": 1, "batches": 1, "warmup": 0, "cache_epochs": 2}
    for key, value in values.items():
        if value < minimum[key]:
            parser.error("--%s must be >= %d, got %d" % (key, minimum[key], value))
    if args.batch_size < 1:
        parser.error("--batch_size must be >= 1, got %d" % args.batch_size)
    names = [name for name in args.variants.split(",") if name]
    unknown = [name for name in names if name not in VARIANTS_BY_NAME]
    if unknown:
        parser.error("--variants: unknown %s; known: %s" % (", ".join(map(repr, unknown)),
                                                            ", ".join(VARIANTS_BY_NAME)))
    variants = (REFERENCE,) + tuple(dict.fromkeys(name for name in names if name != REFERENCE))
    if not files.is_dataset_root(args.data_dir):
        parser.error("--data_dir %r is not a dataset root (no metadata.json); make one with "
                     "`python -m dataprep.synthetic`" % args.data_dir)
    return BenchConfig(data_dir=args.data_dir, batch_size=args.batch_size, variants=variants,
                       results_dir=args.results_dir, one=args.one, split_dir=args.split_dir,
                       pipe_base_dir=args.pipe_base_dir, **values)


# --- one measured run (child process) -----------------------------------------------
def run_one(config: BenchConfig) -> dict:
    """Measures one run of `config.one` in this process.

    Returns:
      `examples_per_sec`, `cpu_us_per_example`, `peak_rss_mb`, `timed_batches`
      and, for per-epoch rows, `rss_mb_per_epoch` (resident memory after each
      epoch) and `rss_mb_before` (before the first batch).

    Raises:
      RuntimeError: the dataset ended before any timed batch.
    """
    import psutil
    import tensorflow as tf

    if config.one is None:
        raise ValueError("run_one measures the row named by `one`, which is not set")
    variant = VARIANTS_BY_NAME[config.one]
    num_epochs, per_epoch = planned_epochs(variant, config)
    # Per-epoch rows plan both; the others leave them None (the dataset repeats without end).
    epochs_read, batches_per_epoch = num_epochs or 0, per_epoch or 0
    warmup = batches_per_epoch if variant.per_epoch else config.warmup
    limit = None if variant.per_epoch else warmup + config.batches
    process = psutil.Process()
    with tf.Graph().as_default():
        iterator = tf.compat.v1.data.make_initializable_iterator(build_dataset(variant, config, num_epochs))
        step = tf.group(tf.nest.flatten(iterator.get_next()))
        with tf.compat.v1.Session() as session:
            session.run(iterator.initializer)
            rss_before = process.memory_info().rss / MIB
            rss_per_epoch: List[float] = []
            count, start_wall, start_cpu = 0, time.perf_counter(), time.process_time()
            while limit is None or count < limit:
                try:
                    session.run(step)
                except tf.errors.OutOfRangeError:
                    break
                count += 1
                if count == warmup:
                    start_wall, start_cpu = time.perf_counter(), time.process_time()
                if variant.per_epoch and count % batches_per_epoch == 0 and len(rss_per_epoch) < epochs_read:
                    rss_per_epoch.append(process.memory_info().rss / MIB)
            wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
    timed = count - warmup
    if timed < 1:
        raise RuntimeError("variant %s: the dataset ended after %d batch(es), within the %d warm-up "
                           "batches" % (variant.name, count, warmup))
    examples = timed * config.batch_size
    result: Dict[str, object] = {"examples_per_sec": examples / wall,
                                 "cpu_us_per_example": cpu / examples * MICROSECONDS,
                                 "peak_rss_mb": common.peak_rss_mb(), "timed_batches": timed}
    if variant.per_epoch:
        result.update(rss_mb_before=rss_before, rss_mb_per_epoch=rss_per_epoch)
    return result


# --- the whole benchmark (parent process) ---------------------------------------------
def child_args(config: BenchConfig, name: str, split_dir: str, pipe_base_dir: str) -> List[str]:
    """The command line of the child process measuring `name` once."""
    return ["-m", "benchmarks.input_speed", "--data_dir", config.data_dir, "--batches", str(config.batches),
            "--warmup", str(config.warmup), "--cache_epochs", str(config.cache_epochs),
            "--batch_size", str(config.batch_size), "--variants", REFERENCE, "--one", name,
            "--split_dir", split_dir, "--pipe_base_dir", pipe_base_dir]


def measure(config: BenchConfig, name: str, split_dir: str, pipe_base_dir: str) -> dict:
    """Runs one measurement of `name` in a fresh process (with a Pipe-mode feeder when it needs one)."""
    from input_pipeline import pipe, pipe_feeder
    args = child_args(config, name, split_dir, pipe_base_dir)
    # The child imports this package whatever the working directory.
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")]))}
    variant = VARIANTS_BY_NAME[name]
    if not variant.pipe:
        return common.run_json_subprocess(args, timeout=CHILD_TIMEOUT_S, env=env)
    epochs, _ = planned_epochs(variant, config)
    if epochs is None:
        raise RuntimeError("the Pipe row %s planned no epochs" % name)
    channels = {PIPE_CHANNEL: train_files(config.data_dir, variant.data_format)}
    env[pipe.BASE_DIR_ENV] = pipe_base_dir
    with pipe_feeder.PipeFeeder(pipe_base_dir, channels, epochs=epochs):
        return common.run_json_subprocess(args, timeout=CHILD_TIMEOUT_S, env=env)


def run_all(config: BenchConfig) -> Tuple[Dict[str, Dict[str, list]], Tuple[float, float]]:
    """Measures every variant `config.runs` times, interleaved.

    Returns:
      `(results, load)`: variant name -> measurement -> one value per run,
      and the machine's 1-minute load average at the start and at the end.
    """
    results: Dict[str, Dict[str, list]] = {name: {} for name in config.variants}
    load_at_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="input_pipeline_benchmark_") as work:
        split_dir, pipe_base_dir = os.path.join(work, "split"), os.path.join(work, "sagemaker")
        if any(VARIANTS_BY_NAME[name].files == FILES_SPLIT for name in config.variants):
            split_tfrecords(train_files(config.data_dir, formats.TFRECORD), split_dir, SPLIT_PARTS)
        for run in range(config.runs):
            for name in config.variants:
                out = measure(config, name, split_dir, pipe_base_dir)
                for key, value in out.items():
                    results[name].setdefault(key, []).append(value)
                print("run %d %-22s %9.0f examples/sec %6.2f us CPU/example %6.0f MiB" % (
                    run, name, out["examples_per_sec"], out["cpu_us_per_example"], out["peak_rss_mb"]),
                    file=sys.stderr)
    return results, (load_at_start, os.getloadavg()[0])


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the benchmark (or, with the hidden `--one`, one measurement) and returns the exit status."""
    config = parse_args(argv)
    if config.one:
        print(json.dumps(run_one(config)))
        return 0
    results, load = run_all(config)
    print(write_outputs(results, load, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
