"""The command line of the Criteo converter: `python -m dataprep.criteo` (console script `criteo-convert`).

    python -m dataprep.criteo --input train.txt --output_dir data/criteo
    python -m dataprep.criteo --input day_1 day_2 --output_dir data/days \\
        --vocab data/criteo --shards 16 --shuffle --negative_sampling 0.25

Its option flags are generated from `ConversionOptions`' fields (the same
names and defaults; `FLAG_HELP` says which fields are flags).
"""

import dataclasses
import time
from typing import Any, Dict, Optional, Sequence

from absl import flags

from cli import entry
from dataprep.criteo.conversion import ConversionReport, convert_with_report
from dataprep.criteo.options import DEFAULT_MIN_COUNT, LIBSVM_LAYOUTS, ConversionOptions
from dataprep.criteo.workers import keep_freed_memory
from input_pipeline import schema

PROGRAM = "dataprep.criteo"
# The fields of `ConversionOptions` that are flags, with their help (`chunk_bytes` is the library's alone).
FLAG_HELP = {
    "val_fraction": "Share of lines for the validation split; 0: none.",
    "shards": "Shard files per split and format (rows balanced to one row; a multiple of the training workers "
              "gives each the same rows).",
    "vocab": "metadata.json (or dataset root) whose vocabulary to apply.",
    "min_count": "Frequency cutoff of the vocabulary (default %d)." % DEFAULT_MIN_COUNT,
    "skip_bad_records": "Skip and count malformed lines instead of failing.",
    "overwrite": "Replace a dataset already in --output_dir.",
    "workers": "Processes for both passes (default: the cores).",
    "memory_mb": "Memory for the value counts of all processes; past it they spill to sorted runs on disk.",
    "shuffle": "Write the rows in a random order across all shards.",
    "seed": "Seed of --shuffle.",
    "negative_sampling": "Keep train rows labelled 0 with this probability; recorded in metadata.json (see "
                         "dataprep.criteo.recalibrate).",
    "libsvm_layout": "fixed: equal-length LibSVM lines, decoded fastest; compact: shortest numbers.",
    "tmp_dir": "Directory for count runs and shuffle buckets (default: system temp).",
}
# Flags with a fixed set of values.
FLAG_CHOICES = {"libsvm_layout": LIBSVM_LAYOUTS}


def summary(output_dir: str, metadata: schema.DatasetMetadata, seconds: float,
            report: Optional[ConversionReport] = None) -> str:
    """A few lines describing a written dataset root, for the console."""
    lines = ["wrote %s in %.1fs: feature_size=%d field_size=%d"
             % (output_dir, seconds, metadata.feature_size, metadata.field_size)]
    for name, info in metadata.splits.items():
        lines.append("  %-10s %10d rows in %d shards" % (name, info.rows, len(info.shards)))
    if report is not None:
        lines.extend(report.lines_text())
    lines.append("  source: %s" % metadata.source)
    return "\n".join(lines)


def _define_option_flag(field: dataclasses.Field, default: Any, flag_values: flags.FlagValues) -> None:
    """One flag for a field of `ConversionOptions`, of the field's type, with its default."""
    name, help_text = field.name, FLAG_HELP[field.name]
    if name in FLAG_CHOICES:
        flags.DEFINE_enum(name, default, FLAG_CHOICES[name], help_text, flag_values=flag_values)
    elif field.type is bool:
        flags.DEFINE_bool(name, default, help_text, flag_values=flag_values)
    elif field.type in (int, Optional[int]):
        flags.DEFINE_integer(name, default, help_text, flag_values=flag_values)
    elif field.type is float:
        flags.DEFINE_float(name, default, help_text, flag_values=flag_values)
    elif field.type in (str, Optional[str]):
        flags.DEFINE_string(name, default, help_text, flag_values=flag_values)
    else:
        raise TypeError("ConversionOptions.%s: no flag type for %r" % (name, field.type))


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines the command-line flags of this tool in `flag_values`."""
    flags.DEFINE_multi_string("input", None, "Criteo TSV file; repeat the flag, or list more files after the flags.",
                              flag_values=flag_values)
    flags.DEFINE_string("output_dir", None, "Dataset root to write.", flag_values=flag_values)
    defaults = ConversionOptions()
    for field in dataclasses.fields(ConversionOptions):
        if field.name in FLAG_HELP:
            _define_option_flag(field, getattr(defaults, field.name), flag_values)
    flags.mark_flag_as_required("output_dir", flag_values=flag_values)


def options_from_flags(flag_values: flags.FlagValues) -> ConversionOptions:
    """The conversion's options as the flags give them.

    Raises:
      ValueError: a value out of its range (the message names it).
    """
    values: Dict[str, Any] = {name: flag_values[name].value for name in FLAG_HELP}
    return ConversionOptions(**values)


def main(argv: Sequence[str]) -> None:
    """Runs the conversion with the parsed flags and prints a summary (the timings once: the library's
    INFO lines of them are for the logs of a Processing job, and `--verbosity 0`)."""
    cfg = flags.FLAGS
    entry.configure_logging(entry.flags_want_detail())
    start = time.time()
    keep_freed_memory()
    try:
        metadata, report = convert_with_report(list(cfg.input or []) + list(argv[1:]), cfg.output_dir,
                                               options_from_flags(cfg))
    except (ValueError, OSError) as e:
        raise SystemExit("error: %s" % e) from e
    print(summary(cfg.output_dir, metadata, time.time() - start, report))


def run() -> None:
    """Console entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)
