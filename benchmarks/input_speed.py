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

import dataclasses
import json
import os
import sys
import tempfile
import time
from typing import Dict, List, Sequence, Tuple

from benchmarks import common, harness
from benchmarks.input_speed_report import write_outputs
from benchmarks.input_speed_variants import (
    FILES_SPLIT,
    PIPE_CHANNEL,
    SPLIT_PARTS,
    VARIANTS_BY_NAME,
    BenchConfig,
    build_dataset,
    planned_epochs,
    split_tfrecords,
    train_files,
)
from input_pipeline import formats

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD_TIMEOUT_S = 900
MIB = float(1 << 20)
MICROSECONDS = 1e6
# What a row's run reports beside its metrics, kept per run for the report (the cache rows' memory per epoch).
PER_EPOCH_KEYS = ("rss_mb_before", "rss_mb_per_epoch")


def parse_args(argv: Sequence[str]) -> BenchConfig:
    """The config of a command line's flags (see `--help`).

    Raises:
      absl.app.UsageError: a bad value, named with its flag.
      absl.flags.Error: an unknown flag.
    """
    return harness.parse(BenchConfig, ["benchmarks.input_speed"] + list(argv))


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

    if not config.one:
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
            "--batch_size", str(config.batch_size), "--one", name, "--split_dir", split_dir,
            "--pipe_base_dir", pipe_base_dir]


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


@dataclasses.dataclass
class RowVariant(harness.Variant):
    """One row, measured in a fresh process per round (with a Pipe-mode feeder where it reads a FIFO)."""

    name: str
    config: BenchConfig
    split_dir: str
    pipe_base_dir: str

    def measure(self, round_index: int) -> harness.Measurement:
        out = measure(self.config, self.name, self.split_dir, self.pipe_base_dir)
        print("run %d %-22s %9.0f examples/sec %6.2f us CPU/example %6.0f MiB" % (
            round_index, self.name, out["examples_per_sec"], out["cpu_us_per_example"], out[harness.PEAK_RSS_MB]),
            file=sys.stderr)
        return harness.Measurement(
            {key: out[key] for key in ("examples_per_sec", "cpu_us_per_example", "timed_batches")},
            out[harness.PEAK_RSS_MB], details={key: out[key] for key in PER_EPOCH_KEYS if key in out})


def table(results: harness.Results) -> Dict[str, Dict[str, list]]:
    """Measured row -> measurement -> one value per run (the metrics, the peak memory, the per-epoch memory)."""
    rows: Dict[str, Dict[str, list]] = {}
    for name in results.names:
        if not results.values[name]:
            continue
        rows[name] = {key: list(values) for key, values in results.values[name].items()}
        for details in results.details[name]:
            for key, value in details.items():
                rows[name].setdefault(key, []).append(value)
    return rows


def run_all(config: BenchConfig) -> Tuple[harness.Results, Tuple[float, float]]:
    """Measures every row `config.rounds` times, interleaved.

    Returns:
      `(results, load)`: what the rows measured, and the machine's 1-minute
      load average at the start and at the end.
    """
    load_at_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="input_pipeline_benchmark_") as work:
        split_dir, pipe_base_dir = os.path.join(work, "split"), os.path.join(work, "sagemaker")
        if any(VARIANTS_BY_NAME[name].files == FILES_SPLIT for name in config.names()):
            split_tfrecords(train_files(config.data_dir, formats.TFRECORD), split_dir, SPLIT_PARTS)
        rows = [RowVariant(name, config, split_dir, pipe_base_dir) for name in config.names()]
        results = harness.run(rows, config.rounds, config.warmup_rounds)
    return results, (load_at_start, os.getloadavg()[0])


def benchmark(config: BenchConfig) -> int:
    """Runs the benchmark (or, with `one`, one measurement in this process); returns the exit status."""
    if config.one:
        print(json.dumps(run_one(config)))
        return 0
    results, load = run_all(config)
    print(write_outputs(results, table(results), load, config))
    return 1 if results.failures else 0


if __name__ == "__main__":
    harness.main(BenchConfig, benchmark)
