"""The data check's cost: a pass per file against one pipeline over every file.

    python -m benchmarks.data_check [--rows 20000] [--shards 4] [--rounds 5] [--results_dir DIR]

`input_pipeline.data_check` reads every file of a run's input once before
the run writes anything, and needs what each file holds on its own (its
record keeps each file's summary; an error names the file). Two ways to
get that, each measured in a fresh process per round, variants
interleaved, on the training and validation files of one synthetic
TFRecord dataset (`--shards` files per split):

* `file_by_file`: a pass of its own per file (`data_check.summarize`),
  `data_check.default_workers()` files at once on threads, as the check
  read files before (and still does where the pipeline below fails, to
  name the file);
* `one_pipeline`: every file in one pipeline that sums up each file on its
  own (`data_check.summaries`), as the check reads them now.

Both find the same summaries (each round checks it). Reported: the check's
wall seconds and CPU seconds (the process's, TensorFlow's threads
included; TensorFlow's import excluded) and the process's peak resident
memory, min/median/max over the rounds, with each round's ratio to
`file_by_file`. Writes `data_check.{md,json}` to `--results_dir` (default
`benchmarks/results/`, the committed results: a trial run names another
directory).
"""

import dataclasses
import json
import os
import resource
import time
from typing import Dict, List

from benchmarks import common, harness
from cli import config_flags

NAME = "data_check"
FILE_BY_FILE = "file_by_file"
ONE_PIPELINE = "one_pipeline"
VARIANTS = (FILE_BY_FILE, ONE_PIPELINE)
WALL_S = "wall_s"
CPU_S = "cpu_s"
METRICS = (WALL_S, CPU_S)
CHILD_TIMEOUT_S = 1800
DEFAULT_DIR = os.path.join("data", "data_check_bench")


@dataclasses.dataclass(frozen=True)
class DataCheckConfig(harness.HarnessConfig):
    """The benchmark's options (its flags)."""

    data_dir: str = config_flags.field(DEFAULT_DIR, "The synthetic dataset (written when missing).")
    rows: int = config_flags.field(20_000, "Rows of the dataset written when missing (train and validation).")
    shards: int = config_flags.field(4, "Files per split of the dataset written when missing.")
    one: str = config_flags.field("", "Internal: check the files this way in this process and print the result "
                                      "as JSON.")

    def __post_init__(self):
        super().__post_init__()
        if self.rows < 1 or self.shards < 1:
            raise ValueError("rows and shards must be >= 1, got %d and %d" % (self.rows, self.shards))
        if self.one and self.one not in VARIANTS:
            raise ValueError("one must be one of %s, got %r" % (", ".join(VARIANTS), self.one))


@dataclasses.dataclass
class CheckVariant(harness.Variant):
    """One way of reading the files, in a fresh process per round."""

    name: str
    config: DataCheckConfig

    def measure(self, round_index: int) -> harness.Measurement:
        out = common.run_json_subprocess(["-m", "benchmarks.data_check", "--data_dir", self.config.data_dir,
                                          "--one", self.name], timeout=CHILD_TIMEOUT_S)
        return harness.Measurement({WALL_S: out[WALL_S], CPU_S: out[CPU_S]}, out[harness.PEAK_RSS_MB],
                                   details={"summaries": out["summaries"]})


def dataset_files(data_dir: str) -> List[str]:
    """The training files, then the validation files, of the dataset root `data_dir` (TFRecord)."""
    from input_pipeline import files, formats, schema
    return [path for split in (schema.TRAIN_SPLIT, schema.VALIDATION_SPLIT)
            for path in files.resolve([data_dir], formats.TFRECORD, split=split)]


def check_once(data_dir: str, variant: str) -> dict:
    """Reads the dataset's files `variant`'s way in this process; the time, CPU, memory and what each file holds."""
    import concurrent.futures

    from input_pipeline import data_check, pipeline, schema

    paths = dataset_files(data_dir)
    config = pipeline.PipelineConfig(field_size=schema.DatasetMetadata.read(data_dir).field_size)
    workers = data_check.default_workers()
    cpu_start, wall_start = _cpu_s(), time.monotonic()
    if variant == FILE_BY_FILE:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, len(paths))) as pool:
            found = dict(zip(paths, pool.map(lambda path: data_check.summarize([path], config), paths)))
    else:
        found = {paths[index]: summary for index, summary in data_check.summaries(paths, config, workers)}
    wall_s, cpu_s = time.monotonic() - wall_start, _cpu_s() - cpu_start
    summaries: Dict[str, dict] = {os.path.relpath(path, data_dir): dataclasses.asdict(found[path]) for path in paths}
    return {WALL_S: wall_s, CPU_S: cpu_s, harness.PEAK_RSS_MB: common.peak_rss_mb(), "summaries": summaries}


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ensure_data(config: DataCheckConfig) -> None:
    """Writes the dataset of `config` unless one is already there."""
    from dataprep import synthetic
    from input_pipeline import schema
    if not os.path.isfile(os.path.join(config.data_dir, schema.METADATA_FILE)):
        synthetic.generate(config.rows, config.data_dir, feature_size=common.FEATURE_SIZE, shards=config.shards)


def benchmark(config: DataCheckConfig) -> int:
    """Runs the benchmark (or, with `one`, one variant's check); returns the exit status."""
    if config.one:
        print(json.dumps(check_once(config.data_dir, config.one)))
        return 0
    ensure_data(config)
    variants = common.select_variants(config.variants or ",".join(VARIANTS),
                                      [CheckVariant(name, config) for name in VARIANTS])
    results = harness.run(variants, config.rounds, config.warmup_rounds)
    found = {json.dumps(details["summaries"], sort_keys=True)
             for name in results.names for details in results.details[name]}
    if len(found) > 1:
        print("the variants found different summaries: %s" % sorted(found))
        return 1
    files = len(dataset_files(config.data_dir))
    body = (
        "The data check's reading of %d TFRecord files (%s rows of a synthetic dataset, %d files per split), %d "
        "rounds, each variant in a fresh process per round, interleaved; the figures are the check's own "
        "(TensorFlow's import excluded), min/median/max over the rounds, and each round's ratio to %s.\n\n"
        % (files, format(config.rows, ","), config.shards, results.rounds_run, results.baseline)
        + common.markdown_table(
            ["variant", "wall s median (min-max)", "ratio", "CPU s median (min-max)", "ratio", "peak RSS MiB"],
            results.table_rows(METRICS)))
    harness.write(results, config, NAME, "The data check: a pass per file against one pipeline", body,
                  harness.machine_record())
    print(body)
    return 1 if results.failures else 0


if __name__ == "__main__":
    harness.main(DataCheckConfig, benchmark)
