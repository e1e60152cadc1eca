"""The command line of the Criteo converter: `python -m dataprep.criteo` (console script `criteo-convert`).

    python -m dataprep.criteo --input train.txt --output_dir data/criteo
    python -m dataprep.criteo --input day_1 day_2 --output_dir data/days \\
        --vocab data/criteo --shards 16 --shuffle --negative_sampling 0.25

Its flags are generated from `ConvertFiles`' and `ConversionOptions`' fields
(`cli.config_flags`; `chunk_bytes` is the library's alone).
"""

import dataclasses
import time
from typing import Optional, Sequence, Tuple

from absl import flags

from cli import config_flags, entry
from dataprep.criteo.conversion import ConversionReport, convert_with_report
from dataprep.criteo.options import ConversionOptions
from dataprep.criteo.workers import keep_freed_memory
from input_pipeline import schema

PROGRAM = "dataprep.criteo"


@dataclasses.dataclass(frozen=True)
class ConvertFiles:
    """What the command line converts and where to (`ConversionOptions` says how)."""

    input: Tuple[str, ...] = config_flags.field(
        (), "Criteo TSV file; repeat the flag, or list more files after the flags.", repeated=True)
    output_dir: Optional[str] = config_flags.field(None, "Dataset root to write.")


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


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines the command-line flags of this tool in `flag_values` (`ConvertFiles`' and `ConversionOptions`')."""
    config_flags.define_flags([ConvertFiles, ConversionOptions], flag_values)
    flags.mark_flag_as_required("output_dir", flag_values=flag_values)


def options_from_flags(flag_values: flags.FlagValues) -> ConversionOptions:
    """The conversion's options as the flags give them.

    Raises:
      ValueError: a value out of its range (the message names it).
    """
    return ConversionOptions(**config_flags.values(ConversionOptions, flag_values))


def main(argv: Sequence[str]) -> None:
    """Runs the conversion with the parsed flags and prints a summary (the timings once: the library's
    INFO lines of them are for the logs of a Processing job, and `--verbosity 0`)."""
    files = ConvertFiles(**config_flags.values(ConvertFiles, flags.FLAGS))
    assert files.output_dir is not None
    entry.configure_logging(entry.flags_want_detail())
    start = time.time()
    keep_freed_memory()
    try:
        metadata, report = convert_with_report(list(files.input) + list(argv[1:]), files.output_dir,
                                               options_from_flags(flags.FLAGS))
    except (ValueError, OSError) as e:
        raise SystemExit("error: %s" % e) from e
    print(summary(files.output_dir, metadata, time.time() - start, report))


def run() -> None:
    """Console entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)
