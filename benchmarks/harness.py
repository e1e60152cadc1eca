"""The harness every benchmark runs on: variants, interleaved rounds, summary, report, flags.

A benchmark names its variants (each a `Variant`: a name and `measure`),
and `run` measures them side by side in one run: the warm-up rounds first
(discarded), then the timed rounds, interleaved round by round (A, B, C, A,
B, C, ...) so that noise from a shared machine falls on all of them alike.
A variant that fails is recorded with its message and left out of the
later rounds; the others go on. `Results` gives per variant and metric the
`common.Stats` of its rounds, and the ratios of each round against the
baseline variant (the first). `write` puts the report (md + json, and the
png a benchmark draws) with the machine record and the exact command line
into the results directory.

A benchmark's options are one frozen config dataclass that extends
`HarnessConfig` (the shared options); its fields carry their help texts
(`cli.config_flags.field`), and `main` generates the absl flags from them:

    @dataclasses.dataclass(frozen=True)
    class SpeedConfig(harness.HarnessConfig):
        steps: int = config_flags.field(300, "Timed steps per round.")

    if __name__ == "__main__":
        harness.main(SpeedConfig, run_benchmark)   # run_benchmark(config) -> exit status
"""

import abc
import dataclasses
import shlex
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import app, flags

from benchmarks import common
from cli import config_flags, entry

# The metric every measurement holds beside its own: the peak resident memory of what ran.
PEAK_RSS_MB = "peak_rss_mb"
# How much of a failure's message the report keeps.
FAILURE_MESSAGE_CHARS = 3000
# The module `python -m package` runs.
MAIN_SUFFIX = ".__main__"


@dataclasses.dataclass(frozen=True)
class HarnessConfig:
    """The options every benchmark shares (a benchmark's config extends it).

    A benchmark whose users type another flag for one of them redefines the
    field with its own `flag=` (the default stays one, the field's).
    """

    rounds: int = config_flags.field(5, "Timed rounds; each measures every variant once, interleaved.")
    warmup_rounds: int = config_flags.field(0, "Rounds measured first and discarded.")
    variants: str = config_flags.field("", "Comma-separated variants to measure, in this order; the first is "
                                           "the baseline of the ratios (empty: all, in the benchmark's order).")
    name: str = config_flags.field("", "The report's file name, without extension (empty: the benchmark's own).")
    results_dir: str = config_flags.field(common.RESULTS_DIR, "Where the report goes (default: the committed "
                                                              "benchmarks/results/; a trial run names another).")

    def __post_init__(self):
        flag = {item.name: config_flags.flag_name(item) for item in dataclasses.fields(self)}
        if self.rounds < 1:
            raise ValueError("--%s must be >= 1, got %d" % (flag["rounds"], self.rounds))
        if self.warmup_rounds < 0:
            raise ValueError("--%s must be >= 0, got %d" % (flag["warmup_rounds"], self.warmup_rounds))


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One round of one variant.

    Attributes:
      metrics: named figures, e.g. `{"examples_per_sec": 81234.0}`.
      peak_rss_mb: the peak resident memory of what ran (a process's, or a
        process tree's), in MiB; None where the benchmark cannot see it
        (processes in other hosts' namespaces).
      details: what else the round saw, kept as it is for the report (e.g.
        the ops of a traced step).
    """

    metrics: Mapping[str, float]
    peak_rss_mb: Optional[float]
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def values(self) -> Dict[str, float]:
        """The metrics and the peak memory (`PEAK_RSS_MB`, where measured)."""
        if self.peak_rss_mb is None:
            return dict(self.metrics)
        return dict(self.metrics, **{PEAK_RSS_MB: self.peak_rss_mb})


class Variant(abc.ABC):
    """What a benchmark compares: a name, and one measurement per round."""

    name: str

    @abc.abstractmethod
    def measure(self, round_index: int) -> Measurement:
        """Runs the variant once; `round_index` counts warm-up rounds from -warmup_rounds up to -1."""


@dataclasses.dataclass
class Results:
    """What `run` measured.

    Attributes:
      names: the variants, in the order run; the first is the baseline.
      values: per variant and metric, the timed rounds' values in order.
      details: per variant, the timed rounds' `Measurement.details` in order.
      failures: per variant that failed, `round N: message` (its latest failure).
      rounds_run: the timed rounds started (fewer than asked after a deadline).
      failed_rounds: per variant, `(round, message)` of every failed round.
      skipped: per variant, the rounds it was not measured in because it
        would not have ended before the deadline (`fit_deadline`).
      seconds: per variant, the wall seconds of its latest measurement.
    """

    names: List[str]
    values: Dict[str, Dict[str, List[float]]]
    details: Dict[str, List[Mapping[str, Any]]]
    failures: Dict[str, str]
    rounds_run: int
    failed_rounds: Dict[str, List[Tuple[int, str]]] = dataclasses.field(default_factory=dict)
    skipped: Dict[str, List[int]] = dataclasses.field(default_factory=dict)
    seconds: Dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def baseline(self) -> str:
        return self.names[0]

    def stats(self, variant: str, metric: str) -> Optional[common.Stats]:
        """The variant's values of `metric` over the timed rounds; None where it has none."""
        found = self.values[variant].get(metric, [])
        return common.Stats(list(found)) if found else None

    def ratios(self, variant: str, metric: str) -> Optional[common.Stats]:
        """Round by round, the variant's `metric` over the baseline's; None where no round has both."""
        mine, base = self.values[variant].get(metric, []), self.values[self.baseline].get(metric, [])
        found = [a / b for a, b in zip(mine, base) if b]
        return common.Stats(found) if found else None

    def table_rows(self, metrics: Sequence[str], spec: str = ".2f") -> List[List[str]]:
        """A report's rows: per variant, its name, then per metric its median (min-max) and its ratio to the
        baseline (median (min-max) of the rounds), then its peak memory in MiB ("-" where there is none)."""
        rows = []
        for name in self.names:
            cells = [name]
            for metric in metrics:
                stats, ratios = self.stats(name, metric), self.ratios(name, metric)
                cells += [stats.fmt(spec) if stats else "-", ratios.fmt(spec) if ratios else "-"]
            peaks = self.values.get(name, {}).get(PEAK_RSS_MB)
            cells.append("%.0f" % max(peaks) if peaks else "-")
            rows.append(cells)
        return rows

    def ratio_table(self) -> Dict[str, Dict[str, Dict[str, float]]]:
        """Per variant and metric, the min/median/max of the per-round ratios (for the json)."""
        table: Dict[str, Dict[str, Dict[str, float]]] = {}
        for variant in self.names:
            for metric in self.values[variant]:
                stats = self.ratios(variant, metric)
                if stats is not None:
                    table.setdefault(variant, {})[metric] = {
                        "min": stats.min, "median": stats.median, "max": stats.max}
        return table


def run(variants: Sequence[Variant], rounds: int, warmup_rounds: int = 0, deadline_s: Optional[float] = None,
        log: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
        after_round: Optional[Callable[[Results], None]] = None, rotate: bool = False,
        retry_failed: bool = False, fit_deadline: bool = False,
        after_measurement: Optional[Callable[[Results], None]] = None) -> Results:
    """Measures `variants` round by round, interleaved; warm-up rounds first, discarded.

    Args:
      variants: what to compare; the first is the baseline.
      rounds: timed rounds.
      warmup_rounds: rounds run first whose measurements are dropped.
      deadline_s: seconds after which no further round starts (None: no limit).
      log: where a line per measurement goes.
      after_round: called with the results so far after every timed round
        (e.g. to write the report, so that a run cut short keeps its
        complete rounds).
      rotate: each round starts one variant further on (A, B, C, then B, C,
        A, ...), so that no variant always runs first, after the machine
        was idle.
      retry_failed: a variant that failed is measured again in the later
        rounds (default: it is left out of them).
      fit_deadline: with `deadline_s`, each measurement is skipped (and
        recorded in `Results.skipped`) unless it can end before the
        deadline: a variant is expected to take what its latest
        measurement took, one never measured the longest any took; later
        rounds still run what fits.
      after_measurement: called with the results so far after every
        measurement, failed ones included.

    Returns:
      The timed rounds' measurements and the failures.
    """
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ValueError("variants %s: each name once" % ", ".join(names))
    if fit_deadline and deadline_s is None:
        raise ValueError("fit_deadline needs a deadline_s")
    results = Results(names, {name: {} for name in names}, {name: [] for name in names}, {}, 0,
                      {name: [] for name in names}, {name: [] for name in names}, {})
    start = time.monotonic()
    for round_index in range(-warmup_rounds, rounds):
        if deadline_s is not None and not fit_deadline and time.monotonic() - start > deadline_s:
            log("deadline of %.0f s passed: %d of %d timed rounds run" % (deadline_s, results.rounds_run, rounds))
            break
        if round_index >= 0:
            results.rounds_run += 1
        start_at = (round_index + warmup_rounds) % len(variants) if rotate and variants else 0
        for variant in list(variants[start_at:]) + list(variants[:start_at]):
            if variant.name in results.failures and not retry_failed:
                continue
            if fit_deadline and deadline_s is not None:
                left = start + deadline_s - time.monotonic()
                estimate = results.seconds.get(variant.name, max(results.seconds.values(), default=0.0))
                if left <= 0 or estimate > left:
                    results.skipped[variant.name].append(round_index)
                    log("round %d %s skipped: %.0f s left before the deadline" % (round_index, variant.name,
                                                                                     max(0.0, left)))
                    continue
            started = time.monotonic()
            try:
                measurement = variant.measure(round_index)
            except Exception as e:  # noqa: BLE001 - a failed variant is reported, the others go on
                message = "".join(traceback.format_exception_only(type(e), e)).strip()[-FAILURE_MESSAGE_CHARS:]
                results.failures[variant.name] = "round %d: %s" % (round_index, message)
                results.failed_rounds[variant.name].append((round_index, str(e)[-FAILURE_MESSAGE_CHARS:]))
                log("round %d %s failed: %s" % (round_index, variant.name, message))
            else:
                log("%s %d %s %s" % ("warm-up" if round_index < 0 else "round", round_index, variant.name,
                                     "  ".join("%s %.6g" % item for item in measurement.values().items())))
                if round_index >= 0:
                    results.details[variant.name].append(measurement.details)
                    for metric, value in measurement.values().items():
                        results.values[variant.name].setdefault(metric, []).append(value)
            results.seconds[variant.name] = time.monotonic() - started
            if after_measurement is not None:
                after_measurement(results)
        if after_round is not None and round_index >= 0:
            after_round(results)
    return results


def recorded_flags(argv: Optional[Sequence[str]] = None) -> List[str]:
    """The command's flags (`argv`, default this process's) as a report records them.

    `--results_dir` is left out: a path of the machine that ran it, not
    part of what was measured.
    """
    given = list(argv if argv is not None else sys.argv[1:])
    kept: List[str] = []
    skip = False
    for flag in given:
        if skip:
            skip = False
        elif flag == "--results_dir":
            skip = True
        elif not flag.startswith("--results_dir="):
            kept.append(flag)
    return kept


def command_line() -> str:
    """The command that started this process, as a user would type it again (without `--results_dir`)."""
    return shlex.join(["python", "-m", _module_name()] + recorded_flags())


def _module_name() -> str:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is None:
        return sys.argv[0]
    # `python -m package` runs `package.__main__`; a user types the package.
    return spec.name[:-len(MAIN_SUFFIX)] if spec.name.endswith(MAIN_SUFFIX) else spec.name


def machine_record() -> Dict[str, str]:
    """The machine, the package versions and the exact command line a result came from."""
    return dict(common.machine_info(), command=command_line())


def failures_section(results: Results) -> str:
    """The failed variants as markdown ("" when none failed)."""
    if not results.failures:
        return ""
    return "\n\n## Failures\n\n" + "\n".join("- %s: %s" % item for item in results.failures.items())


def write(results: Results, config: HarnessConfig, default_name: str, title: str, body: str,
          record: Mapping[str, str], chart: Optional[Callable[[str, str], str]] = None,
          extra: Optional[Mapping[str, Any]] = None) -> str:
    """Writes `<results_dir>/<name>.md` and `.json` (and `.png` where `chart` draws one); returns the .md path.

    Args:
      results: what `run` measured.
      config: the run's options (its `name` and `results_dir`).
      default_name: the file name where `config.name` is empty.
      title: the report's title.
      body: the report's text (its tables).
      record: the machine record (`machine_record`).
      chart: `chart(name, results_dir)` draws the png (e.g. with `common.bar_chart`).
      extra: what else the json holds beside the measurements, by key (e.g.
        a benchmark's summary; the harness's own keys win).
    """
    name = config.name or default_name
    # The options as run, with no path of this machine (the default results directory is absolute).
    options = dict(dataclasses.asdict(config), results_dir=common.project_path(config.results_dir))
    path = common.write_report(
        name, title, body + failures_section(results), dict(record), results.values,
        results_dir=config.results_dir,
        extra={**(extra or {}), "failures": results.failures, "ratios": results.ratio_table(),
               "rounds_run": results.rounds_run, "config": options})
    if chart is not None:
        chart(name, config.results_dir)
    return path


def config_from(config_class: type, flag_values: flags.FlagValues = flags.FLAGS):
    """The config the parsed flags give."""
    try:
        return config_class(**config_flags.values(config_class, flag_values))
    except ValueError as e:
        raise app.UsageError(str(e)) from e


def options(config_class: type, argv: Sequence[str]):
    """The config of a command line (`argv[0]` the program), with flags of its own (not absl's global ones).

    Raises:
      ValueError: a value the config refuses (its message as the config gives it).
      absl.flags.Error: an unknown flag or a value of the wrong type.
    """
    flag_values = flags.FlagValues()
    config_flags.define_flags([config_class], flag_values)
    flag_values(list(argv))
    return config_class(**config_flags.values(config_class, flag_values))


def parse(config_class: type, argv: Sequence[str]):
    """`options`, a refused value raised as the `app.UsageError` a command line reports."""
    try:
        return options(config_class, argv)
    except ValueError as e:
        raise app.UsageError(str(e)) from e


def main(config_class: type, benchmark: Callable[..., int], program: str = "") -> None:
    """The entry point: defines the flags of `config_class`, parses them, runs `benchmark(config)`.

    Started as every command line of the project is (`cli.entry.run`): `--help`
    and `--helpfull` list the flags and exit 0; a bad flag or value ends with
    `<program>: error: <message>`; `--help` starts with the program's
    docstring. `program` is the name a user types (default: the module of
    `benchmark`); a package's `__main__` names its package.
    """
    def run_benchmark(argv: List[str]) -> int:
        if len(argv) > 1:
            raise app.UsageError("unexpected arguments %s: give flags only" % " ".join(argv[1:]))
        return benchmark(config_from(config_class))

    module = sys.modules.get(benchmark.__module__)
    spec = getattr(module, "__spec__", None)
    program = program or (spec.name if spec is not None else benchmark.__module__)   # not __main__
    documented = sys.modules.get(program, module)
    entry.run(run_benchmark, program, define_flags=lambda: config_flags.define_flags([config_class]),
              doc=getattr(documented, "__doc__", None) or "")


def main_or_run(config_class: type, benchmark: Callable[..., int], program: str,
                argv: Optional[Sequence[str]] = None) -> int:
    """`main` of the process's command line where `argv` is None; else `benchmark` of `argv` (a test's).

    Args:
      config_class: the benchmark's options.
      benchmark: `benchmark(config)` -> exit status; it raises `app.UsageError`
        for a bad option it finds.
      program: the name a user types.
      argv: a command line without the program's name.

    Returns:
      The exit status; with `argv`, a bad option prints `error: <message>` and gives 2.
    """
    if argv is None:
        main(config_class, benchmark, program=program)
        return 0
    try:
        return benchmark(options(config_class, [program] + list(argv)))
    except (ValueError, app.UsageError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2

