"""The Criteo conversion as SageMaker Processing jobs: the container side.

    python -m dataprep.criteo_processing count --val_fraction 0.1
    python -m dataprep.criteo_processing convert --min_count 10 --shards 4
    python -m dataprep.criteo_processing combine

Each stage is one Processing job; `jobs.sagemaker.processing` builds the
three jobs, runs them on emulated hosts or submits them. A stage reads the
Processing container contract: `/opt/ml/config/resourceconfig.json`
(`current_host`, `hosts`), its inputs under `/opt/ml/processing/input/<name>`
and its outputs under `/opt/ml/processing/output/<name>` (uploaded at the
end of the job; every instance's files land under one S3 prefix, so each
instance names its files after itself). The directories can be moved with
flags (for tests).

1. `count` (N instances): input `raw` (the raw TSV files, `ShardedByS3Key`:
   each instance gets its own files). Each instance runs
   `criteo.count_part` on its files into `output/counts/<current_host>/`:
   its exact value counts, no cutoff.
2. `convert` (N instances): input `raw` (`ShardedByS3Key` again) and
   `counts` (every instance's counts, `FullyReplicated`). Each instance
   merges all the counts itself with `criteo.merge_part_counts`, which is
   deterministic, so every instance builds the same vocabulary: the one a
   single `criteo.convert` of all the input builds. It converts its files
   with it and moves the shards into output `data` as
   `<split>/part-<current_host>-<k>.{libsvm,tfrecord}`, so that the
   instances' shards never collide; its part's metadata (rows per shard,
   lines read, bad records) goes to output `parts` as
   `<current_host>/{metadata.json,part.json}`. The validation fraction is
   the one the counts were made with.
3. `combine` (1 instance): inputs `parts` and `counts`. Checks that every
   part used the same vocabulary and that every raw line is accounted for
   (each part's rows plus its bad records are the lines it read, and the
   lines and rows of all parts are those the count found), then writes the
   dataset root's `metadata.json` (every part's shards with their rows) to
   output `data`, the S3 prefix holding the shards.

The union of the `convert` and `combine` outputs `data` is a dataset root
as `input_pipeline.schema` describes it: `metadata.json`, `train/*`,
`validation/*`.
"""

import dataclasses
import json
import os
import posixpath
import shutil
import sys
import tempfile
from typing import Dict, List, Sequence, Tuple

from absl import app, flags, logging

from cli import config_flags, entry
from dataprep import criteo
from input_pipeline import formats, schema

PROGRAM = "dataprep.criteo_processing"

STAGES = ("count", "convert", "combine")
COUNT, CONVERT, COMBINE = STAGES
CONFIG_DIR = "/opt/ml/config"
PROCESSING_DIR = "/opt/ml/processing"
INPUT_DIR = posixpath.join(PROCESSING_DIR, "input")
OUTPUT_DIR = posixpath.join(PROCESSING_DIR, "output")
# Scratch space (count runs, the vocabulary, the part before its shards are
# moved into the output): on the job's storage volume with the inputs and
# outputs, and never uploaded.
WORK_DIR = posixpath.join(PROCESSING_DIR, "work")
RESOURCE_CONFIG = "resourceconfig.json"
# Names of the stages' inputs (under INPUT_DIR) and outputs (under OUTPUT_DIR).
RAW, COUNTS, PARTS, DATA = "raw", "counts", "parts", "data"
STAGE_INPUTS = {COUNT: (RAW,), CONVERT: (RAW, COUNTS), COMBINE: (PARTS, COUNTS)}
STAGE_OUTPUTS = {COUNT: (COUNTS,), CONVERT: (DATA, PARTS), COMBINE: (DATA,)}
PART_FILE = "part.json"
SHARD_PREFIX = "part-"
EXIT_FAILURE = 1

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class StageOptions:
    """The conversion's options, as the stages take them.

    Attributes:
      val_fraction: count: share of lines for the validation split (the
        convert stage takes it from the counts).
      min_count: convert: the vocabulary's frequency cutoff over all parts.
      shards: convert: shard files per split and format on each instance.
      skip_bad_records: count, convert: skip and count malformed lines.
      workers: count, convert: processes per instance (None: its cores).
      memory_mb: count, convert: memory for value counts per instance.
      libsvm_layout: convert: `fixed` or `compact`.
    """

    val_fraction: float = config_flags.field(criteo.DEFAULT_VAL_FRACTION,
                                             "count: share of lines for the validation split.")
    min_count: int = config_flags.field(criteo.DEFAULT_MIN_COUNT,
                                        "convert: frequency cutoff of the vocabulary, over all parts.")
    shards: int = config_flags.field(criteo.DEFAULT_SHARDS,
                                     "convert: shard files per split and format written by each instance.")
    skip_bad_records: bool = config_flags.field(False, "count, convert: skip and count malformed lines.")
    workers: int = config_flags.field(0, "count, convert: processes per instance (0: its cores).")
    memory_mb: float = config_flags.field(criteo.DEFAULT_MEMORY_MB,
                                          "count, convert: memory for the value counts per instance.")
    libsvm_layout: str = config_flags.field(criteo.LIBSVM_LAYOUTS[0], "convert: LibSVM layout.",
                                            choices=criteo.LIBSVM_LAYOUTS)

    def __post_init__(self):
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError("--val_fraction must be in [0, 1), got %r" % self.val_fraction)
        for flag in ("min_count", "shards"):
            if getattr(self, flag) < 1:
                raise ValueError("--%s must be >= 1, got %r" % (flag, getattr(self, flag)))
        if self.workers < 0:
            raise ValueError("--workers must be >= 0 (0: the instance's cores), got %r" % self.workers)
        if not self.memory_mb > 0:
            raise ValueError("--memory_mb must be > 0, got %r" % self.memory_mb)
        if self.libsvm_layout not in criteo.LIBSVM_LAYOUTS:
            raise ValueError("--libsvm_layout must be one of %s, got %r"
                             % (", ".join(criteo.LIBSVM_LAYOUTS), self.libsvm_layout))

    def arguments(self, stage: str) -> List[str]:
        """The container arguments that run `stage` with these options."""
        if stage not in STAGES:
            raise ValueError("stage must be one of %s, got %r" % (", ".join(STAGES), stage))
        args = [stage]
        if stage == COUNT:
            args += ["--val_fraction", repr(float(self.val_fraction))]
        if stage == CONVERT:
            args += ["--min_count", str(self.min_count), "--shards", str(self.shards),
                     "--libsvm_layout", self.libsvm_layout]
        if stage in (COUNT, CONVERT):
            args += ["--workers", str(self.workers), "--memory_mb", repr(float(self.memory_mb)),
                     "--skip_bad_records" if self.skip_bad_records else "--noskip_bad_records"]
        return args

    @property
    def processes(self) -> int:
        """The workers of the conversion: `workers`, or the cores this process may run on."""
        return self.workers or len(os.sched_getaffinity(0))


@dataclasses.dataclass(frozen=True)
class ContainerDirs:
    """Where the container contract's files are (SageMaker's paths unless moved for tests)."""

    config_dir: str = config_flags.field(CONFIG_DIR, "Where resourceconfig.json is.")
    input_dir: str = config_flags.field(INPUT_DIR, "Where the inputs are (one directory per input).")
    output_dir: str = config_flags.field(OUTPUT_DIR, "Where the outputs go (one directory per output).")
    work_dir: str = config_flags.field(WORK_DIR, "Scratch space.")

    def input(self, name: str) -> str:
        """The directory of input `name`."""
        return os.path.join(self.input_dir, name)

    def output(self, name: str) -> str:
        """The directory of output `name`."""
        return os.path.join(self.output_dir, name)


def read_resource_config(config_dir: str) -> Tuple[str, List[str]]:
    """`(current_host, hosts)` from `resourceconfig.json`.

    Raises:
      FileNotFoundError: no such file.
      ValueError: the file lacks them, or `current_host` is not in `hosts`.
    """
    path = os.path.join(config_dir, RESOURCE_CONFIG)
    with open(path) as f:
        config = json.load(f)
    host, hosts = config.get("current_host"), config.get("hosts")
    if not isinstance(hosts, list) or host not in hosts:
        raise ValueError("%s: current_host %r must be one of hosts %r" % (path, host, hosts))
    return host, hosts


def input_files(directory: str) -> List[str]:
    """The files under an input directory, sorted as S3 lists their keys.

    Raises:
      FileNotFoundError: no files there.
    """
    found = sorted(os.path.join(d, name) for d, _, names in os.walk(directory) for name in names)
    if not found:
        raise FileNotFoundError("input %s holds no files" % directory)
    return found


def part_dirs(directory: str, marker: str) -> List[str]:
    """The instances' directories under an input, those holding `marker`, in host order (algo-1, algo-2, ...).

    Raises:
      FileNotFoundError: none there.
    """
    found = [os.path.join(directory, name) for name in os.listdir(directory)
             if os.path.isfile(os.path.join(directory, name, marker))] if os.path.isdir(directory) else []
    if not found:
        raise FileNotFoundError("input %s holds no instance's %s" % (directory, marker))
    return sorted(found, key=_host_order)


def _host_order(path: str):
    name = os.path.basename(path)
    prefix, _, number = name.rpartition("-")
    return (prefix, int(number)) if number.isdigit() else (name, 0)


def _fresh_output(path: str) -> str:
    """Creates `path`, refusing one that holds files already (outputs are never overwritten)."""
    if os.path.isdir(path) and os.listdir(path):
        raise FileExistsError("output %s already holds %s" % (path, ", ".join(sorted(os.listdir(path))[:3])))
    os.makedirs(path, exist_ok=True)
    return path


def count(dirs: ContainerDirs, options: StageOptions) -> dict:
    """Stage 1: counts this instance's raw files into `output/counts/<current_host>`."""
    host, _ = read_resource_config(dirs.config_dir)
    files = input_files(dirs.input(RAW))
    counts_dir = _fresh_output(os.path.join(dirs.output(COUNTS), host))
    summary = criteo.count_part(files, counts_dir, val_fraction=options.val_fraction,
                                skip_bad_records=options.skip_bad_records, workers=options.processes,
                                memory_mb=options.memory_mb)
    logging.info("%s: counted %d lines of %d file(s): %s rows, %d bad records", host, summary["lines"], len(files),
                 summary["rows"], summary["bad_records"])
    return summary


def _counted_val_fraction(counts_dirs: Sequence[str]) -> float:
    with open(os.path.join(counts_dirs[0], criteo.COUNTS_FILE)) as f:
        return json.load(f)["val_fraction"]


def _shard_stem(split_stem: str, host: str) -> str:
    """`train/part-00003` of an instance's part -> `train/part-<host>-00003` in the dataset root."""
    split, name = posixpath.split(split_stem)
    if not name.startswith(SHARD_PREFIX):
        raise ValueError("unexpected shard name %r" % split_stem)
    return posixpath.join(split, "%s%s-%s" % (SHARD_PREFIX, host, name[len(SHARD_PREFIX):]))


def convert(dirs: ContainerDirs, options: StageOptions) -> dict:
    """Stage 2: one vocabulary from every instance's counts; converts this instance's raw files with it."""
    host, _ = read_resource_config(dirs.config_dir)
    files = input_files(dirs.input(RAW))
    counts_dirs = part_dirs(dirs.input(COUNTS), criteo.COUNTS_FILE)
    data_dir = dirs.output(DATA)
    part_dir = _fresh_output(os.path.join(dirs.output(PARTS), host))
    os.makedirs(dirs.work_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="criteo-%s-" % host, dir=dirs.work_dir)
    try:
        vocab_dir = os.path.join(work, "vocabulary")
        criteo.merge_part_counts(counts_dirs, vocab_dir, min_count=options.min_count, memory_mb=options.memory_mb)
        staging = os.path.join(work, "dataset")
        metadata, report = criteo.convert_with_report(
            files, staging,
            criteo.ConversionOptions(val_fraction=_counted_val_fraction(counts_dirs), shards=options.shards,
                                     vocab=vocab_dir, skip_bad_records=options.skip_bad_records,
                                     workers=options.processes, memory_mb=options.memory_mb,
                                     libsvm_layout=options.libsvm_layout, tmp_dir=work))
        if sum(report.rows.values()) + report.bad_records != report.lines:
            raise RuntimeError("%s: %d lines read, but %s rows written and %d bad records"
                               % (host, report.lines, report.rows, report.bad_records))
        moves = [(os.path.join(staging, stem + ext), os.path.join(data_dir, _shard_stem(stem, host) + ext))
                 for info in metadata.splits.values() for stem in info.shards
                 for ext in formats.extensions().values()]
        existing = [target for _, target in moves if os.path.lexists(target)]
        if existing:
            raise FileExistsError("output %s already holds %s" % (data_dir, ", ".join(existing[:3])))
        for source, target in moves:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.move(source, target)
        for info in metadata.splits.values():
            info.shards = {_shard_stem(stem, host): rows for stem, rows in info.shards.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    metadata.write(part_dir)
    part = {"host": host, "inputs": [os.path.relpath(path, dirs.input(RAW)) for path in files],
            "lines": report.lines, "rows": report.rows, "bad_records": report.bad_records,
            "min_count": options.min_count, "counts_parts": len(counts_dirs)}
    with open(os.path.join(part_dir, PART_FILE), "w") as f:
        json.dump(part, f, indent=1, sort_keys=True)
    logging.info("%s: converted %d lines of %d file(s) into %s rows (%d bad records); vocabulary of %d parts' "
                 "counts, feature_size %d", host, report.lines, len(files), report.rows, report.bad_records,
                 len(counts_dirs), metadata.feature_size)
    return part


def combine(dirs: ContainerDirs) -> schema.DatasetMetadata:
    """Stage 3: checks the parts against each other and the counts; writes the dataset root's metadata.json.

    Raises:
      ValueError: the parts used different vocabularies, or lines or rows
        went missing between the count and the conversion.
      FileExistsError: output `data` already holds a metadata.json.
    """
    _, hosts = read_resource_config(dirs.config_dir)
    if len(hosts) != 1:
        raise ValueError("combine runs on one instance, got hosts %s" % hosts)
    parts_dirs = part_dirs(dirs.input(PARTS), PART_FILE)
    counted = []
    for directory in part_dirs(dirs.input(COUNTS), criteo.COUNTS_FILE):
        with open(os.path.join(directory, criteo.COUNTS_FILE)) as f:
            counted.append(json.load(f))
    metas, parts = [], []
    for directory in parts_dirs:
        metas.append(schema.DatasetMetadata.read(directory))
        with open(os.path.join(directory, PART_FILE)) as f:
            parts.append(json.load(f))
    first = metas[0]
    for meta, part in zip(metas[1:], parts[1:]):
        if (meta.vocabulary, meta.feature_size, meta.dense_clip) != (first.vocabulary, first.feature_size,
                                                                    first.dense_clip):
            raise ValueError("%s and %s converted with different vocabularies (feature_size %d and %d)"
                             % (parts[0]["host"], part["host"], first.feature_size, meta.feature_size))
    lines = sum(part["lines"] for part in parts)
    bad = sum(part["bad_records"] for part in parts)
    counted_lines = sum(summary["lines"] for summary in counted)
    if lines != counted_lines:
        raise ValueError("the count read %d lines, the conversion %d: the raw input changed in between"
                         % (counted_lines, lines))
    splits: Dict[str, schema.SplitInfo] = {}
    for meta in metas:
        for name, info in meta.splits.items():
            split = splits.setdefault(name, schema.SplitInfo())
            split.rows += info.rows
            split.shards.update(info.shards)
    for name, split in splits.items():
        counted_rows = sum(summary["rows"][name] for summary in counted)
        if split.rows != counted_rows:
            raise ValueError("split %s: the count found %d rows, the conversion wrote %d" % (name, counted_rows,
                                                                                         split.rows))
    rows = sum(split.rows for split in splits.values())
    if rows + bad != lines:
        raise ValueError("%d lines read, but %d rows written and %d bad records" % (lines, rows, bad))
    metadata = schema.DatasetMetadata(
        feature_size=first.feature_size, splits=splits, vocabulary=first.vocabulary, dense_clip=first.dense_clip,
        source="Criteo TSV converted by %d instance(s) (%s): %d records converted, %d bad records skipped; "
        "vocabulary built from the train split of all %d part(s) with min_count=%d; val_fraction=%g"
        % (len(parts), ", ".join(part["host"] for part in parts), rows, bad, len(counted), parts[0]["min_count"],
           counted[0]["val_fraction"]))
    data_dir = dirs.output(DATA)
    if os.path.lexists(os.path.join(data_dir, schema.METADATA_FILE)):
        raise FileExistsError("output %s already holds a %s" % (data_dir, schema.METADATA_FILE))
    os.makedirs(data_dir, exist_ok=True)
    metadata.write(data_dir, split_views=True)
    logging.info("combined %d part(s): %s rows, %d bad records, feature_size %d", len(parts),
                 {name: split.rows for name, split in splits.items()}, bad, metadata.feature_size)
    return metadata


def define_flags() -> None:
    """Defines the flags of the stages (each stage reads its own; see `StageOptions`) and the container's paths."""
    config_flags.define_flags([StageOptions, ContainerDirs])


def main(argv: Sequence[str]) -> None:
    """Runs the stage named by the first argument."""
    if len(argv) != 2 or argv[1] not in STAGES:
        raise app.UsageError("expected one stage, one of %s; got %r" % (", ".join(STAGES), list(argv[1:])))
    stage = argv[1]
    criteo.keep_freed_memory()
    try:
        dirs = ContainerDirs(**config_flags.values(ContainerDirs, FLAGS))
        options = StageOptions(**config_flags.values(StageOptions, FLAGS))
        if stage == COUNT:
            count(dirs, options)
        elif stage == CONVERT:
            convert(dirs, options)
        else:
            combine(dirs)
    except (ValueError, OSError) as e:
        print("criteo_processing %s failed: %s" % (stage, e), file=sys.stderr, flush=True)
        sys.exit(EXIT_FAILURE)


def run() -> None:
    """Console entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)


if __name__ == "__main__":
    run()
