"""Criteo converter benchmark: throughput and memory against distinct values and workers; text decode speed.

    python -m benchmarks.criteo_convert [--rows 2000000] [--distinct 500000,8000000] [--workers 1,2] [--runs 3]
                                        [--variants NAME,...] [--results_dir DIR]

Part 1, conversion: generates raw Criteo-shaped TSV (`dataprep.raw_criteo`,
once per distinct-value count, kept in `--data_dir`) and converts it with
`python -m dataprep.criteo` in a fresh process per run, variants
interleaved round by round. Reports rows/s and MB/s of input (wall time of
the whole command, both passes), the peak resident memory of the largest
process and the sum of every process's peak (an upper bound of the total at
any moment), whether every input row is in the output, and the speed-up of
2 workers over 1.

Part 2, reading what the converter writes: the same rows (a `--decode_rows`
conversion) read back with TFRecord, compact LibSVM and fixed-width LibSVM,
in a bare pipeline built here the way the default one is (files
interleaved, batch 1024, vectorized decode, prefetch), and each decode
alone on one cached batch. Fixed-width files are read as byte rows, as the
pipeline reads them; `libsvm_fixed_lines` reads them line by line instead
(as with `skip_bad_records`). Examples/sec and CPU us/example, each run a
fresh process.

Every conversion and every read is a variant of `benchmarks.harness`
(`--variants` names some of them: `convert_<distinct>_<workers>w`,
`convert_<distinct>_x<copies>`, and the read variants by name), all of them
interleaved round by round. Writes `benchmarks/results/criteo_convert.{md,json,png}`
after every round, so that a run cut short keeps its complete rounds.
"""

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence, Tuple

from benchmarks import common, harness
from cli import config_flags

DEFAULT_ROWS = 2_000_000
DEFAULT_DISTINCT = (500_000, 8_000_000)
DEFAULT_WORKERS = (1, 2)
DEFAULT_COPIES = 2
DEFAULT_DATA_DIR = os.path.join("data", "criteo_raw")
NAME = "criteo_convert"
DECODE_TIMEOUT_S = 600
DECODE_ROWS = 200_000
DECODE_BATCH = 1024
DECODE_WARMUP_BATCHES = 20
DECODE_TIMED_BATCHES = 200
DECODE_VARIANTS = ("tfrecord", "libsvm_compact", "libsvm_fixed", "libsvm_fixed_lines",
                   "decode_tfrecord", "decode_libsvm_compact", "decode_libsvm_fixed")
TARGET_RSS_MB = 1024
TARGET_SPEEDUP = 1.8
TARGET_TEXT_RATIO = 2.0
SAMPLE_INTERVAL_S = 0.2
CONVERT_TIMEOUT_S = 3600
_MB = 1e6
_MIB = float(1 << 20)


def _integers(text: str, flag: str) -> List[int]:
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise ValueError("--%s %r: give comma-separated integers, e.g. 1,2" % (flag, text)) from None
    if not values or min(values) < 1:
        raise ValueError("--%s %r: give comma-separated integers >= 1, e.g. 1,2" % (flag, text))
    return values


@dataclasses.dataclass(frozen=True)
class CriteoConvertConfig(harness.HarnessConfig):
    """The benchmark's options (its flags)."""

    rounds: int = config_flags.field(3, "Rounds; each runs every conversion and read once, a fresh process each.",
                                     flag="runs")
    data_dir: str = config_flags.field(DEFAULT_DATA_DIR, "Where the generated inputs are kept.")
    rows: int = config_flags.field(DEFAULT_ROWS, "Rows of each generated input.")
    distinct: str = config_flags.field(",".join(str(d) for d in DEFAULT_DISTINCT),
                                       "Comma-separated distinct-value counts, an input each.")
    workers: str = config_flags.field(",".join(str(w) for w in DEFAULT_WORKERS),
                                      "Comma-separated worker counts of the converter.")
    memory_mb: int = config_flags.field(512, "The converter's --memory_mb.")
    copies: int = config_flags.field(DEFAULT_COPIES, "Independent 1-worker conversions run at once as the "
                                                     "speed-up ceiling; < 2 skips.")
    decode_rows: int = config_flags.field(DECODE_ROWS, "Rows of part 2's dataset; 0 skips part 2.")
    one_decode: str = config_flags.field("", "Internal: time this read variant in this process and print JSON.")
    roots: str = config_flags.field("", "Internal: the read variants' dataset roots, as JSON.")

    def __post_init__(self):
        super().__post_init__()
        self.distinct_counts()
        self.worker_counts()
        if self.rows < 1:
            raise ValueError("--rows must be >= 1, got %d" % self.rows)
        if self.decode_rows < 0:
            raise ValueError("--decode_rows must be >= 0 (0 skips part 2), got %d" % self.decode_rows)
        if self.one_decode and self.one_decode not in DECODE_VARIANTS:
            raise ValueError("--one_decode %r: not one of %s" % (self.one_decode, ", ".join(DECODE_VARIANTS)))

    def distinct_counts(self) -> List[int]:
        return _integers(self.distinct, "distinct")

    def worker_counts(self) -> List[int]:
        return _integers(self.workers, "workers")


def raw_file(data_dir: str, rows: int, distinct: int) -> str:
    """The generated TSV for (rows, distinct), written once."""
    from dataprep import raw_criteo
    path = os.path.join(data_dir, "raw-%d-rows-%d-distinct.tsv" % (rows, distinct))
    if not os.path.isfile(path):
        print("generating %s" % path, flush=True)
        raw_criteo.write(raw_criteo.RawSpec(rows, distinct), path)
    return path


def convert_once(path: str, workers: int, memory_mb: int, layout: str = "fixed", copies: int = 1) -> dict:
    """Runs the converter CLI on `path` in `copies` child processes started together.

    Returns:
      Time (until the last copy ends), memory (over every process of every
      copy) and row counts (summed over the copies).
    """
    from input_pipeline import schema
    work = tempfile.mkdtemp(prefix="criteo-bench-")
    outs = [os.path.join(work, "out-%d" % copy) for copy in range(copies)]
    commands = [[sys.executable, "-m", "dataprep.criteo", "--input", path, "--output_dir", out, "--overwrite",
                 "--workers", str(workers), "--memory_mb", str(memory_mb), "--libsvm_layout", layout]
                for out in outs]
    try:
        with contextlib.ExitStack() as stack:
            logs = [stack.enter_context(open(out + ".log", "w+")) for out in outs]
            start = time.time()
            processes = [subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)
                         for command, log in zip(commands, logs)]
            samplers = [stack.enter_context(common.ProcessTreeSampler(process.pid, SAMPLE_INTERVAL_S))
                        for process in processes]
            for process in processes:
                process.wait(timeout=CONVERT_TIMEOUT_S)
            seconds = time.time() - start
            outputs = []
            for log in logs:
                log.seek(0)
                outputs.append(log.read())
        for command, process, output in zip(commands, processes, outputs):
            if process.returncode != 0:
                raise RuntimeError("%s failed:\n%s" % (" ".join(command), output[-3000:]))
        rows = sum(info.rows for out in outs for info in schema.DatasetMetadata.read(out).splits.values())
        peaks = [p.peak_rss_bytes / _MIB for sampler in samplers for p in sampler.processes]
        with open(path, "rb") as f:
            lines = sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 24), b""))
        return {"seconds": seconds, "rows": rows, "lines": lines * copies, "copies": copies,
                "input_mb": os.path.getsize(path) * copies / _MB, "largest_rss_mb": max(peaks),
                "sum_rss_mb": sum(peaks), "processes": len(peaks),
                "cpu_seconds": sum(sampler.cpu_seconds_at(time.time()) for sampler in samplers),
                "phases": [line.strip() for line in outputs[0].splitlines() if line.startswith("  ")
                           and line.split()[0] in ("count", "vocabulary", "write", "join", "total")]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def decode_data(data_dir: str, rows: int) -> Dict[str, str]:
    """Dataset roots of the same rows with fixed and compact LibSVM (TFRecord is in both)."""
    from dataprep import criteo
    from input_pipeline import schema
    roots = {}
    for layout in ("fixed", "compact"):
        root = os.path.join(data_dir, "decode-%d-%s" % (rows, layout))
        if not os.path.isfile(os.path.join(root, schema.METADATA_FILE)):
            criteo.convert([raw_file(data_dir, rows, rows)], root, criteo.ConversionOptions(val_fraction=0.0, shards=4,
                                                                                            overwrite=True,
                                                                                            libsvm_layout=layout))
        roots[layout] = root
    return roots


def decode_one(variant: str, roots: Dict[str, str]) -> dict:
    """Times one read variant in this process (see the module docstring)."""
    import glob
    import resource

    import tensorflow as tf

    from input_pipeline import formats, pipeline, schema

    fmt = formats.TFRECORD if variant.endswith(formats.TFRECORD.name) else formats.LIBSVM
    root = roots["compact" if variant.endswith("compact") else "fixed"]
    files = sorted(glob.glob(os.path.join(root, schema.TRAIN_SPLIT, "*" + fmt.extension)))
    # skip_bad_records reads LibSVM line by line.
    config = pipeline.PipelineConfig(data_format=fmt, field_size=schema.FIELD_SIZE,
                                     skip_bad_records=variant.endswith("_lines"))

    def decode(*batch):
        return fmt.decode_batch(batch, config, file_names=files)

    cached = None
    if variant.startswith("decode_"):
        first = next(iter(fmt.records(files[:1], config).batch(DECODE_BATCH)))
        cached = tuple(part.numpy() for part in (first if isinstance(first, tuple) else (first,)))
    with tf.Graph().as_default():
        if cached is not None:
            dataset = tf.data.Dataset.from_tensors(tuple(tf.constant(part) for part in cached)).repeat()
        else:
            dataset = fmt.records(files, config).repeat().batch(DECODE_BATCH, drop_remainder=True)
        dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
        features, labels = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        step = tf.group(tf.reduce_sum(labels), tf.reduce_sum(features[schema.FEAT_IDS]),
                        tf.reduce_sum(features[schema.FEAT_VALS]))
        with tf.compat.v1.Session() as session:
            for _ in range(DECODE_WARMUP_BATCHES):
                session.run(step)
            cpu = resource.getrusage(resource.RUSAGE_SELF)
            start = time.time()
            for _ in range(DECODE_TIMED_BATCHES):
                session.run(step)
            seconds = time.time() - start
            after = resource.getrusage(resource.RUSAGE_SELF)
    examples = DECODE_TIMED_BATCHES * DECODE_BATCH
    cpu_seconds = (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime)
    return {"examples_per_sec": examples / seconds, "cpu_us_per_example": cpu_seconds / examples * 1e6,
            harness.PEAK_RSS_MB: common.peak_rss_mb()}


def _stats(results: harness.Results, name: str, metric: str) -> common.Stats:
    stats = results.stats(name, metric)
    if stats is None:
        raise ValueError("variant %s has no %s" % (name, metric))
    return stats


def convert_label(distinct: int, workers: int, copies: int = 1) -> str:
    """A conversion as the report names it."""
    label = "%s distinct, %d worker%s" % (format(distinct, ","), workers, "" if workers == 1 else "s")
    return label if copies == 1 else "%s, %d conversions at once" % (label, copies)


def convert_variant_name(distinct: int, workers: int, copies: int = 1) -> str:
    """A conversion as `--variants` names it."""
    return "convert_%d_%dw" % (distinct, workers) if copies == 1 else "convert_%d_x%d" % (distinct, copies)


def conversions(config: CriteoConvertConfig) -> List[Tuple[int, int, int]]:
    """(distinct, workers, copies) of every conversion row, in the order a round runs them."""
    rows = []
    for distinct in config.distinct_counts():
        rows += [(distinct, workers, 1) for workers in config.worker_counts()]
        if config.copies > 1:
            rows.append((distinct, 1, config.copies))
    return rows


@dataclasses.dataclass
class ConvertVariant(harness.Variant):
    """One conversion (a distinct-value count, workers, copies at once), a fresh converter process per round."""

    name: str
    label: str
    path: str
    workers: int
    copies: int
    memory_mb: int

    def measure(self, round_index: int) -> harness.Measurement:
        result = convert_once(self.path, self.workers, self.memory_mb, copies=self.copies)
        print("%s: %.1fs, %.1f MB/s, largest RSS %.0f MiB, sum %.0f MiB, rows %d/%d"
              % (self.label, result["seconds"], result["input_mb"] / result["seconds"], result["largest_rss_mb"],
                 result["sum_rss_mb"], result["rows"], result["lines"]), flush=True)
        metrics = {key: float(result[key]) for key in ("seconds", "rows", "lines", "input_mb", "sum_rss_mb",
                                                       "cpu_seconds")}
        metrics.update(rows_per_sec=result["lines"] / result["seconds"],
                       mb_per_sec=result["input_mb"] / result["seconds"])
        return harness.Measurement(metrics, result["largest_rss_mb"], details={"phases": result["phases"]})


@dataclasses.dataclass
class DecodeVariant(harness.Variant):
    """One way of reading the converter's output (`DECODE_VARIANTS`), a fresh process per round."""

    name: str
    roots: Dict[str, str]

    def measure(self, round_index: int) -> harness.Measurement:
        result = common.run_json_subprocess(["-m", "benchmarks.criteo_convert", "--one_decode", self.name,
                                             "--roots", json.dumps(self.roots)], timeout=DECODE_TIMEOUT_S)
        print("%s: %.0f examples/sec" % (self.name, result["examples_per_sec"]), flush=True)
        return harness.Measurement({"examples_per_sec": result["examples_per_sec"],
                                    "cpu_us_per_example": result["cpu_us_per_example"]}, result[harness.PEAK_RSS_MB])


def report(config: CriteoConvertConfig, results: harness.Results, load: Sequence[float]) -> str:
    """The markdown body of the results file: the measured rows, the targets those rows decide."""
    measured = {name for name in results.names if results.values[name]}
    convert_rows = [(d, w, c) for d, w, c in conversions(config) if convert_variant_name(d, w, c) in measured]
    rows = []
    for distinct, workers, copies in convert_rows:
        name = convert_variant_name(distinct, workers, copies)
        values = results.values[name]
        rows.append([
            convert_label(distinct, workers, copies), _stats(results, name, "rows_per_sec").fmt(),
            _stats(results, name, "mb_per_sec").fmt(",.1f"), _stats(results, name, "seconds").fmt(",.1f"),
            _stats(results, name, harness.PEAK_RSS_MB).fmt(), _stats(results, name, "sum_rss_mb").fmt(),
            "yes" if values["rows"] == values["lines"] else "NO"])
    body = ["Raw Criteo-shaped TSV (`dataprep.raw_criteo`: %s rows, the near-unique categorical fields "
            "holding the distinct values named in each row, the other fields small Zipf vocabularies) converted by "
            "`python -m dataprep.criteo --workers W --memory_mb %d` (defaults otherwise: val_fraction 0.1, "
            "4 shards, min_count 10, fixed-width LibSVM and TFRecord), %d runs per row, each a fresh process, rows "
            "interleaved. Time: the whole command, both passes and the join. Rows accounted: rows written == lines "
            "of the input. RSS: `VmHWM` of each process of the tree (the converter and its spawned workers), "
            "largest one and sum of all peaks (an upper bound of the total at any moment). Rows `%d conversions "
            "at once`: as many independent 1-worker conversions of the input started together, the time until the "
            "last ends, rows and MB of all of them: what this machine's cores give work that shares nothing, the "
            "ceiling of a speed-up. 1-minute load average %.2f at the start, %.2f at the end, this benchmark "
            "included." % (format(config.rows, ","), config.memory_mb, results.rounds_run, config.copies, load[0],
                           load[1])]
    if rows:
        body += ["", "## Conversion", "",
                 common.markdown_table(["row", "rows/s median (min-max)", "MB/s", "seconds",
                                        "peak RSS MiB, largest process", "peak RSS MiB, sum of processes",
                                        "every row accounted"], rows), "",
                 "Phases of the last run of each row (from the converter's console report; of the first conversion "
                 "in rows of several):", ""]
        for distinct, workers, copies in convert_rows:
            phases = results.details[convert_variant_name(distinct, workers, copies)][-1]["phases"]
            body.append("- %s: %s" % (convert_label(distinct, workers, copies),
                                      "; ".join(" ".join(p.split()[:2]) for p in phases[:-1])))
    body += ["", "## Targets", "", common.markdown_table(["target", "measured", "met"],
                                                         target_rows(config, results, measured))]
    decoded = [variant for variant in DECODE_VARIANTS if variant in measured]
    if decoded:
        base = _stats(results, decoded[0], "examples_per_sec").median
        body += ["", "## Reading what the converter writes", "",
                 "%s rows converted once in each LibSVM layout (TFRecord identical in both), 4 train shards. Bare "
                 "pipelines built by the benchmark like the default one (files interleaved, batch %d, vectorized "
                 "decode with `input_pipeline.decoders`, AUTOTUNE map and prefetch), graph mode; `decode_*` rows: the "
                 "decode alone on one cached batch. %d warm-up then %d timed batches per run, %d runs, fresh process "
                 "each. CPU us/example: CPU time of the process per timed example."
                 % (format(config.decode_rows, ","), DECODE_BATCH, DECODE_WARMUP_BATCHES, DECODE_TIMED_BATCHES,
                    results.rounds_run), ""]
        decode_rows = []
        for variant in decoded:
            rate = _stats(results, variant, "examples_per_sec")
            decode_rows.append([variant, rate.fmt(), "%.2f" % (rate.median / base),
                                "%.2f" % _stats(results, variant, "cpu_us_per_example").median,
                                _stats(results, variant, harness.PEAK_RSS_MB).fmt()])
        body.append(common.markdown_table(["row", "examples/sec median (min-max)", "ratio to %s" % decoded[0],
                                           "CPU us/example", "peak RSS MiB"], decode_rows))
    return "\n".join(body)


def target_rows(config: CriteoConvertConfig, results: harness.Results, measured: set) -> List[List[str]]:
    """The targets the measured variants decide, each with what was measured and whether it was met."""
    rows = []
    top = max(config.distinct_counts())
    top_names = [name for name in (convert_variant_name(top, w) for w in config.worker_counts()) if name in measured]
    if top_names:
        largest = max(max(results.values[name]["sum_rss_mb"]) for name in top_names)
        rows.append(["%s rows with %s distinct values: peak RSS (sum of processes) < %d MiB"
                     % (format(config.rows, ","), format(top, ","), TARGET_RSS_MB),
                     "%.0f MiB (max over its runs and worker counts)" % largest,
                     "yes" if largest < TARGET_RSS_MB else "no"])
    converted = [name for name in results.names if name.startswith("convert_") and name in measured]
    if converted:
        every = all(results.values[name]["rows"] == results.values[name]["lines"] for name in converted)
        rows.append(["every row accounted for", "all runs" if every else "NOT all runs", "yes" if every else "no"])
    for distinct in config.distinct_counts():
        one, two = convert_variant_name(distinct, 1), convert_variant_name(distinct, 2)
        if one not in measured or two not in measured:
            continue
        one_s = _stats(results, one, "seconds").median
        speedup = one_s / _stats(results, two, "seconds").median
        ceiling = ""
        at_once = convert_variant_name(distinct, 1, config.copies)
        if config.copies > 1 and at_once in measured:
            ceiling = "; %d conversions at once: %.2fx" % (
                config.copies, config.copies * one_s / _stats(results, at_once, "seconds").median)
        rows.append(["2 workers >= %.1fx 1 worker (%s distinct)" % (TARGET_SPEEDUP, format(distinct, ",")),
                     "%.2fx (median seconds)%s" % (speedup, ceiling), "yes" if speedup >= TARGET_SPEEDUP else "no"])
    if "tfrecord" in measured and "libsvm_fixed" in measured:
        slower = (_stats(results, "tfrecord", "examples_per_sec").median
                  / _stats(results, "libsvm_fixed", "examples_per_sec").median)
        rows.append(["fixed-width LibSVM pipeline within %.0fx of TFRecord" % TARGET_TEXT_RATIO,
                     "%.2fx slower" % slower, "yes" if slower <= TARGET_TEXT_RATIO else "no"])
    return rows


def write_outputs(config: CriteoConvertConfig, results: harness.Results, load: Sequence[float]) -> str:
    """Writes the results of the rounds done so far; returns the .md path."""
    record = harness.machine_record()
    body = report(config, results, load)
    labels = {convert_variant_name(d, w, c): convert_label(d, w, c) for d, w, c in conversions(config)}
    converted = [name for name in results.names if name in labels and results.values[name]]

    def chart(name: str, results_dir: str) -> str:
        return common.bar_chart(name, "Criteo conversion throughput (%s raw rows)" % format(config.rows, ","),
                                [labels[n] for n in converted], [_stats(results, n, "mb_per_sec") for n in converted],
                                "MB/s of raw TSV", results_dir=results_dir)

    return harness.write(results, config, NAME, "Criteo conversion: bounded memory, every core, text decode",
                         body + "\n\nCommand: `%s`\n" % record["command"], record,
                         chart=chart if converted else None, extra={"load": list(load)})


def benchmark(config: CriteoConvertConfig) -> int:
    """Runs the benchmark (or, with `one_decode`, one read variant in this process); returns the exit status."""
    if config.one_decode:
        print(json.dumps(decode_one(config.one_decode, json.loads(config.roots))))
        return 0
    os.makedirs(config.data_dir, exist_ok=True)
    convert = [ConvertVariant(convert_variant_name(d, w, c), convert_label(d, w, c),
                              raw_file(config.data_dir, config.rows, d), w, c, config.memory_mb)
               for d, w, c in conversions(config)]
    decode: List[harness.Variant] = []
    if config.decode_rows:
        roots = decode_data(config.data_dir, config.decode_rows)
        decode = [DecodeVariant(variant, roots) for variant in DECODE_VARIANTS]
    variants = common.select_variants(config.variants, list(convert) + decode)
    load_start = os.getloadavg()[0]
    paths: List[str] = []

    def write_round(so_far: harness.Results) -> None:
        paths.append(write_outputs(config, so_far, (load_start, os.getloadavg()[0])))

    results = harness.run(variants, config.rounds, config.warmup_rounds, after_round=write_round)
    if paths:
        with open(paths[-1]) as f:
            print(f.read())
        print("wrote %s" % paths[-1])
    return 1 if results.failures else 0


if __name__ == "__main__":
    harness.main(CriteoConvertConfig, benchmark)
