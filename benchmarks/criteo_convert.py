"""Criteo converter benchmark: throughput and memory against distinct values and workers; text decode speed.

    python -m benchmarks.criteo_convert [--rows 2000000] [--distinct 500000,8000000] [--workers 1,2] [--runs 3]

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

Writes `benchmarks/results/criteo_convert.{md,json,png}`.
"""

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence, Tuple

from benchmarks import common

DEFAULT_ROWS = 2_000_000
DEFAULT_DISTINCT = (500_000, 8_000_000)
DEFAULT_WORKERS = (1, 2)
DEFAULT_COPIES = 2
DEFAULT_DATA_DIR = os.path.join("data", "criteo_raw")
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
    return {"examples_per_sec": examples / seconds, "cpu_us_per_example": cpu_seconds / examples * 1e6}


def _stats(results: Dict[str, List[dict]], name: str, key: str) -> common.Stats:
    return common.Stats([r[key] for r in results[name]])


def convert_name(distinct: int, workers: int, copies: int = 1) -> str:
    name = "%s distinct, %d worker%s" % (format(distinct, ","), workers, "" if workers == 1 else "s")
    return name if copies == 1 else "%s, %d conversions at once" % (name, copies)


def conversions(args) -> List[Tuple[int, int, int]]:
    """(distinct, workers, copies) of every conversion row, in the order a round runs them."""
    rows = []
    for distinct in args.distinct:
        rows += [(distinct, workers, 1) for workers in args.workers]
        if args.copies > 1:
            rows.append((distinct, 1, args.copies))
    return rows


def report(args, convert_results: Dict[str, List[dict]], decode_results: Dict[str, List[dict]],
           load: Sequence[float]) -> str:
    """The markdown body of the results file."""
    rows = []
    for distinct, workers, copies in conversions(args):
        name = convert_name(distinct, workers, copies)
        results = convert_results[name]
        seconds = _stats(convert_results, name, "seconds")
        lines = results[0]["lines"]
        mb = results[0]["input_mb"]
        rows.append([
            name, common.Stats([lines / r["seconds"] for r in results]).fmt(),
            common.Stats([mb / r["seconds"] for r in results]).fmt(",.1f"), seconds.fmt(",.1f"),
            _stats(convert_results, name, "largest_rss_mb").fmt(),
            _stats(convert_results, name, "sum_rss_mb").fmt(),
            "yes" if all(r["rows"] == r["lines"] for r in results) else "NO"])
    speedups = []
    for distinct in args.distinct:
        if 1 in args.workers and 2 in args.workers:
            one = _stats(convert_results, convert_name(distinct, 1), "seconds").median
            two = _stats(convert_results, convert_name(distinct, 2), "seconds").median
            ceiling = None
            if args.copies > 1:
                at_once = _stats(convert_results, convert_name(distinct, 1, args.copies), "seconds").median
                ceiling = args.copies * one / at_once
            speedups.append((distinct, one / two, ceiling))
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
            "included." % (format(args.rows, ","), args.memory_mb, args.runs, args.copies, load[0], load[1]),
            "", "## Conversion", "",
            common.markdown_table(["row", "rows/s median (min-max)", "MB/s", "seconds", "peak RSS MiB, largest process",
                                   "peak RSS MiB, sum of processes", "every row accounted"], rows), ""]
    body.append("Phases of the last run of each row (from the converter's console report; of the first conversion "
                "in rows of several):")
    body.append("")
    for name, results in convert_results.items():
        body.append("- %s: %s" % (name, "; ".join(" ".join(p.split()[:2]) for p in results[-1]["phases"][:-1])))
    body += ["", "## Targets", ""]
    target_rows = []
    top = max(args.distinct)
    target_rows.append(["%s rows with %s distinct values: peak RSS (sum of processes) < %d MiB"
                        % (format(args.rows, ","), format(top, ","), TARGET_RSS_MB),
                        "%.0f MiB (max over its runs and worker counts)" % max(
                            r["sum_rss_mb"] for w in args.workers for r in convert_results[convert_name(top, w)]),
                        "yes" if max(r["sum_rss_mb"] for w in args.workers
                                     for r in convert_results[convert_name(top, w)]) < TARGET_RSS_MB else "no"])
    target_rows.append(["every row accounted for", "all runs" if all(
        r["rows"] == r["lines"] for results in convert_results.values() for r in results) else "NOT all runs",
        "yes" if all(r["rows"] == r["lines"] for results in convert_results.values() for r in results) else "no"])
    for distinct, speedup, ceiling in speedups:
        target_rows.append(["2 workers >= %.1fx 1 worker (%s distinct)" % (TARGET_SPEEDUP, format(distinct, ",")),
                            "%.2fx (median seconds)%s" % (speedup, "" if ceiling is None else
                                                          "; %d conversions at once: %.2fx" % (args.copies, ceiling)),
                            "yes" if speedup >= TARGET_SPEEDUP else "no"])
    if decode_results:
        tf_rate = _stats(decode_results, "tfrecord", "examples_per_sec").median
        fixed_rate = _stats(decode_results, "libsvm_fixed", "examples_per_sec").median
        target_rows.append(["fixed-width LibSVM pipeline within %.0fx of TFRecord" % TARGET_TEXT_RATIO,
                            "%.2fx slower" % (tf_rate / fixed_rate), "yes" if tf_rate / fixed_rate <= TARGET_TEXT_RATIO
                            else "no"])
    body.append(common.markdown_table(["target", "measured", "met"], target_rows))
    if decode_results:
        tf_rate = _stats(decode_results, "tfrecord", "examples_per_sec").median
        body += ["", "## Reading what the converter writes", "",
                 "%s rows converted once in each LibSVM layout (TFRecord identical in both), 4 train shards. Bare "
                 "pipelines built by the benchmark like the default one (files interleaved, batch %d, vectorized "
                 "decode with `input_pipeline.decoders`, AUTOTUNE map and prefetch), graph mode; `decode_*` rows: the "
                 "decode alone on one cached batch. %d warm-up then %d timed batches per run, %d runs, fresh process "
                 "each. CPU us/example: CPU time of the process per timed example."
                 % (format(args.decode_rows, ","), DECODE_BATCH, DECODE_WARMUP_BATCHES, DECODE_TIMED_BATCHES,
                    args.runs), ""]
        decode_rows = []
        for variant in DECODE_VARIANTS:
            rate = _stats(decode_results, variant, "examples_per_sec")
            decode_rows.append([variant, rate.fmt(), "%.2f" % (rate.median / tf_rate),
                                "%.2f" % _stats(decode_results, variant, "cpu_us_per_example").median])
        body.append(common.markdown_table(["row", "examples/sec median (min-max)", "ratio to tfrecord",
                                           "CPU us/example"], decode_rows))
    return "\n".join(body)


def write_outputs(args, convert_results: Dict[str, List[dict]], decode_results: Dict[str, List[dict]],
                  load: Sequence[float], rounds: int) -> str:
    """Writes the results of the rounds done so far; returns the .md path."""
    args.runs = rounds
    info = common.machine_info()
    body = report(args, convert_results, decode_results, load)
    recorded_args = {k: v for k, v in vars(args).items() if k not in ("roots", "results_dir")}
    path = common.write_report("criteo_convert", "Criteo conversion: bounded memory, every core, text decode", body,
                               info, {"convert": convert_results, "decode": decode_results, "load": load,
                                      "args": recorded_args},
                               results_dir=args.results_dir)
    names = list(convert_results)
    common.bar_chart("criteo_convert", "Criteo conversion throughput (%s raw rows)" % format(args.rows, ","), names,
                     [common.Stats([r["input_mb"] / r["seconds"] for r in convert_results[n]]) for n in names],
                     "MB/s of raw TSV", results_dir=args.results_dir)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", default=DEFAULT_DATA_DIR, help="where generated inputs are kept")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--distinct", default=",".join(str(d) for d in DEFAULT_DISTINCT))
    parser.add_argument("--workers", default=",".join(str(w) for w in DEFAULT_WORKERS))
    parser.add_argument("--memory_mb", type=int, default=512)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--copies", type=int, default=DEFAULT_COPIES,
                        help="independent 1-worker conversions run at once as the speed-up ceiling; < 2 skips")
    parser.add_argument("--decode_rows", type=int, default=DECODE_ROWS, help="0 skips part 2")
    parser.add_argument("--results_dir", default=common.RESULTS_DIR)
    parser.add_argument("--one_decode", help=argparse.SUPPRESS)
    parser.add_argument("--roots", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_decode:
        print(json.dumps(decode_one(args.one_decode, json.loads(args.roots))))
        return 0
    args.distinct = [int(d) for d in args.distinct.split(",")]
    args.workers = [int(w) for w in args.workers.split(",")]
    os.makedirs(args.data_dir, exist_ok=True)
    inputs = {distinct: raw_file(args.data_dir, args.rows, distinct) for distinct in args.distinct}
    roots = decode_data(args.data_dir, args.decode_rows) if args.decode_rows else {}
    load_start = os.getloadavg()[0]
    convert_results: Dict[str, List[dict]] = {}
    decode_results: Dict[str, List[dict]] = {}
    path = ""
    for run in range(args.runs):
        for distinct, workers, copies in conversions(args):
            name = convert_name(distinct, workers, copies)
            result = convert_once(inputs[distinct], workers, args.memory_mb, copies=copies)
            convert_results.setdefault(name, []).append(result)
            print("run %d %s: %.1fs, %.1f MB/s, largest RSS %.0f MiB, sum %.0f MiB, rows %d/%d"
                  % (run, name, result["seconds"], result["input_mb"] / result["seconds"],
                     result["largest_rss_mb"], result["sum_rss_mb"], result["rows"], result["lines"]), flush=True)
        for variant in DECODE_VARIANTS if roots else ():
            result = common.run_json_subprocess(["-m", "benchmarks.criteo_convert", "--one_decode", variant,
                                                 "--roots", json.dumps(roots)], timeout=600)
            decode_results.setdefault(variant, []).append(result)
            print("run %d %s: %.0f examples/sec" % (run, variant, result["examples_per_sec"]), flush=True)
        # Results after every round, so that a run cut short still leaves its complete rounds.
        path = write_outputs(args, convert_results, decode_results, (load_start, os.getloadavg()[0]), run + 1)
    with open(path) as f:
        print(f.read())
    print("wrote %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
