"""The report of `benchmarks.input_speed`: its table, the targets, memory per epoch, where the time goes.

Nothing here measures: `benchmarks.input_speed` measures the rows of
`benchmarks.input_speed_variants` and passes what it measured (variant name
-> measurement -> one value per run) to `write_outputs`, which writes
`<results_dir>/input_pipeline.{md,json,png}`.
"""

from typing import Dict, List, Optional, Tuple

from benchmarks import common, harness
from benchmarks.input_speed_variants import (
    CACHE_SHARDS,
    KIND_DECODE_ONLY,
    REFERENCE,
    VARIANTS_BY_NAME,
    BenchConfig,
    train_files,
    train_rows,
)
from input_pipeline import formats, schema

NAME = "input_pipeline"

# Targets (2 cores, batch 1024).
TARGET_TFRECORD_EXAMPLES_PER_SEC = 100_000
TARGET_VECTORIZED_OVER_SCALAR = 5.0
TARGET_LIBSVM_SLOWDOWN = 2.0

NOTES = """## Reading the rows

- Nothing but the input pipeline runs between batches here. `no_prefetch` thus has no training step to
  overlap with, and the parallel (AUTOTUNE) decode map still works ahead with its own buffer: the row shows
  what the final prefetch costs or saves on the pipeline alone, not what it does in training.
- Pipe mode has no parallel reads: `PipeModeDataset` reads one FIFO, fed by `PipeFeeder` in the parent
  process, whose CPU is not in the row's CPU column.
- The cache rows time the epochs after the first: `cache_memory` then serves records from memory (only the
  batching and the decode remain), while `cache_after_repeat` still reads the files and also copies every
  record into a cache that is never read back.
- On a shared machine the min-max spread is mostly other work; CPU us/example varies less than
  examples/sec."""


def _median(results: dict, name: str, key: str = "examples_per_sec") -> Optional[float]:
    if name not in results:
        return None
    return _measured(results, name, key)


def _measured(results: dict, name: str, key: str = "examples_per_sec") -> float:
    """The median of a row that was measured."""
    return common.Stats(results[name][key]).median


def targets(results: dict) -> List[Tuple[str, Optional[float], str, str, Optional[bool]]]:
    """`(target, measured, unit, format spec, met)` of each target.

    `measured` and `met` are None when a row the target needs was not measured.
    """
    tfrecord, libsvm = _median(results, REFERENCE), _median(results, formats.LIBSVM.name)
    scalar = _median(results, "libsvm_scalar_map")
    rows = [("vectorized TFRecord >= %s examples/sec" % format(TARGET_TFRECORD_EXAMPLES_PER_SEC, ","),
             tfrecord, "examples/sec", ",.0f",
             None if tfrecord is None else tfrecord >= TARGET_TFRECORD_EXAMPLES_PER_SEC)]
    over_scalar = tfrecord / scalar if tfrecord is not None and scalar else None
    rows.append(("vectorized TFRecord >= %gx scalar LibSVM" % TARGET_VECTORIZED_OVER_SCALAR, over_scalar, "x",
                 ".1f", None if over_scalar is None else over_scalar >= TARGET_VECTORIZED_OVER_SCALAR))
    slowdown = tfrecord / libsvm if tfrecord is not None and libsvm else None
    rows.append(("vectorized LibSVM within %gx of TFRecord" % TARGET_LIBSVM_SLOWDOWN, slowdown, "x slower", ".2f",
                 None if slowdown is None else slowdown <= TARGET_LIBSVM_SLOWDOWN))
    return rows


def memory_table(results: dict, config: BenchConfig) -> str:
    """Resident memory after each epoch of the per-epoch rows (median over runs)."""
    names = [name for name in config.names() if VARIANTS_BY_NAME[name].per_epoch and results.get(name)]
    if not names:
        return ""
    header = (["row", "before (MiB)"] + ["epoch %d" % (e + 1) for e in range(config.cache_epochs)]
              + ["growth per epoch after the first (MiB)"])
    rows = []
    for name in names:
        runs = results[name]["rss_mb_per_epoch"]
        per_epoch = [common.Stats([run[e] for run in runs if len(run) > e]).median
                     for e in range(config.cache_epochs)]
        growth = (per_epoch[-1] - per_epoch[0]) / (len(per_epoch) - 1)
        rows.append([name, "%.0f" % _measured(results, name, "rss_mb_before")]
                    + ["%.0f" % value for value in per_epoch] + ["%+.1f" % growth])
    return common.markdown_table(header, rows)


def profile_text(results: dict) -> str:
    """Where the time goes, from the reference and profile rows (CPU per example, medians)."""
    cpu = {name: _measured(results, name, "cpu_us_per_example") for name in results}
    speed = {name: _measured(results, name) for name in results}
    lines = []
    for data_format in formats.names():
        full, decode = cpu.get(data_format), cpu.get("decode_" + data_format)
        if full is not None and decode is not None:
            lines.append("- %s: the default pipeline costs %.2f us of CPU per example; its decode alone %.2f us "
                         "(%.0f%%), reading, interleaving and batching the rest, %.2f us."
                         % (data_format, full, decode, 100.0 * decode / full, full - decode))
    if "bare_chunked" in results and "bare_sequential" in results:
        lines.append(
            "- TFRecord reading: bare TFRecordDataset %s examples/sec (%.2f us CPU/example); the chunked "
            "interleave without accounting %s (%.2f us); the default with the damaged-file accounting %s "
            "(%.2f us). The accounting costs %.2f us of CPU per example (%.0f%% of the default's CPU)."
            % (format(speed["bare_sequential"], ",.0f"), cpu["bare_sequential"],
               format(speed["bare_chunked"], ",.0f"), cpu["bare_chunked"], format(speed[REFERENCE], ",.0f"),
               cpu[REFERENCE], cpu[REFERENCE] - cpu["bare_chunked"],
               100.0 * (cpu[REFERENCE] - cpu["bare_chunked"]) / cpu[REFERENCE]))
        lines.append("- The chunked parallel interleave itself costs %.2f us of CPU per example over reading the "
                     "files one after the other." % (cpu["bare_chunked"] - cpu["bare_sequential"]))
    decode_libsvm, tfrecord = cpu.get("decode_libsvm"), cpu.get(REFERENCE)
    if decode_libsvm is not None and tfrecord is not None and "libsvm" in results:
        lines.append(
            "- LibSVM against TFRecord: %.1fx the CPU per example (%.2f against %.2f us), %.1fx slower in "
            "examples/sec. The LibSVM decode must check the line grammar, split each line into %d tokens and "
            "convert them from text, where parse_example reads binary numbers; the decode alone costs %.2f us, "
            "%s %gx the whole TFRecord pipeline's %.2f us, so while the pipeline is CPU-bound the %gx target %s."
            % (cpu["libsvm"] / tfrecord, cpu["libsvm"], tfrecord, speed[REFERENCE] / speed["libsvm"],
               1 + 2 * schema.FIELD_SIZE, decode_libsvm,
               "more than" if decode_libsvm > TARGET_LIBSVM_SLOWDOWN * tfrecord else "less than",
               TARGET_LIBSVM_SLOWDOWN, tfrecord, TARGET_LIBSVM_SLOWDOWN,
               "cannot be met by a faster pipeline around the same decode"
               if decode_libsvm > TARGET_LIBSVM_SLOWDOWN * tfrecord else "is within reach of the decode"))
    for data_format in formats.names():
        scalar = data_format + "_scalar_map"
        if data_format in results and scalar in results:
            lines.append("- %s: vectorized decode %.1fx the examples/sec of the scalar one (%.2f against %.2f us "
                         "CPU/example)." % (data_format, speed[data_format] / speed[scalar], cpu[data_format],
                                            cpu[scalar]))
    return "\n".join(lines)


def report(results: dict, config: BenchConfig, info: Dict[str, str], load: Tuple[float, float]) -> str:
    """The markdown body of the report (`results`: row -> measurement -> a value per run; `load`: 1-minute load
    average at the start and end)."""
    measured = [name for name in config.names() if results.get(name)]
    stats = {name: common.Stats(results[name]["examples_per_sec"]) for name in measured}
    reference = stats[REFERENCE].median if REFERENCE in stats else None
    table = common.markdown_table(
        ["row", "what", "examples/sec median (min-max)", "ratio to %s" % REFERENCE, "CPU us/example",
         "peak RSS MiB"],
        [[name, VARIANTS_BY_NAME[name].description, stats[name].fmt(),
          "-" if reference is None else "%.2f" % (stats[name].median / reference),
          "%.2f" % _measured(results, name, "cpu_us_per_example"), "%.0f" % max(results[name]["peak_rss_mb"])]
         for name in measured])
    target_rows = [[target, "-" if measured is None else format(measured, spec) + " " + unit,
                    "not measured" if met is None else ("yes" if met else "no")]
                   for target, measured, unit, spec, met in targets(results)]
    sections = [
        "The input pipeline alone, batch %d, on the train split of `%s` (%s rows in %d TFRecord and LibSVM "
        "shards). Graph mode as `tf.estimator` runs it: `tf.compat.v1.data.make_initializable_iterator` and a "
        "session loop running an op that depends on each batch (made, not copied into Python). %d runs per "
        "row, each a fresh process, rows interleaved; %d warm-up batches then %d timed batches per run, except "
        "the cache rows: %d epochs of %d shard, the first (which fills the cache) untimed. CPU us/example: "
        "CPU time of all the process's threads per timed example (Pipe mode: the reader only; the feeder runs "
        "in the parent process). Machine: %s cores, shared with other work while measured (1-minute load average "
        "%.2f at the start, %.2f at the end, this benchmark included)."
        % (config.batch_size, config.data_dir,
           format(train_rows(train_files(config.data_dir, formats.TFRECORD), formats.TFRECORD), ","),
           len(train_files(config.data_dir, formats.TFRECORD)), config.rounds, config.warmup, config.batches,
           config.cache_epochs, CACHE_SHARDS, info["cores"], load[0], load[1]),
        table,
        "## Targets (2 cores, batch %d)\n\n" % config.batch_size
        + common.markdown_table(["target", "measured (medians)", "met"], target_rows),
    ]
    memory = memory_table(results, config)
    if memory:
        sections.append(
            "## Resident memory per epoch (cache rows, MiB, median over runs)\n\nSampled after every "
            "`rows // batch` batches (an epoch; with `cache_after_repeat` batches straddle epochs, so up to one "
            "batch early per epoch). Caching after repeat keeps every epoch again; caching before repeat keeps "
            "one copy.\n\n" + memory)
    profile = profile_text(results)
    if profile:
        sections.append("## Where the time goes (medians)\n\n" + profile)
    sections.append(NOTES + "\n\nThe chart (`%s.png`) leaves out the decode-only profile rows." % NAME)
    return "\n\n".join(sections)


def write_outputs(measured: harness.Results, results: dict, load: Tuple[float, float], config: BenchConfig) -> str:
    """Writes `<results_dir>/input_pipeline.{md,json,png}`; returns the markdown body.

    Args:
      measured: what the harness measured.
      results: the same, row -> measurement -> a value per run (`input_speed.table`).
      load: the 1-minute load average at the start and the end.
      config: the run's options.
    """
    record = harness.machine_record()
    body = report(results, config, record, load)
    charted = [name for name in config.names()
               if VARIANTS_BY_NAME[name].kind != KIND_DECODE_ONLY and results.get(name)]

    def chart(name: str, results_dir: str) -> str:
        return common.bar_chart(name, "Input pipeline alone, batch %d (%s cores)" % (config.batch_size,
                                                                                   record["cores"]),
                                charted, [common.Stats(results[row]["examples_per_sec"]) for row in charted],
                                "examples/sec", TARGET_TFRECORD_EXAMPLES_PER_SEC, "TFRecord target",
                                results_dir=results_dir)

    harness.write(measured, config, NAME, "Input-pipeline throughput",
                  body + "\n\nCommand: `%s`" % record["command"], record, chart=chart if charted else None,
                  extra={"load_average_1min": {"start": load[0], "end": load[1]}, "variants": results,
                         "targets": [{"target": t, "measured": m, "met": met} for t, m, _, _, met in targets(results)]})
    return body
