"""How every command line of this project starts, reports user errors and keeps the console quiet.

A command's output is its own short record; TensorFlow's is kept to its real
warnings and errors:

* `TF_CPP_MIN_LOG_LEVEL` (TensorFlow's C++ log level) is set to 2 (the C++
  runtime's INFO and WARNING lines dropped, its errors kept) before
  TensorFlow is imported, unless the environment already sets it (to a
  non-empty value);
* the import's CUDA plugin-registration errors and GPU-discovery lines,
  which TensorFlow prints on any machine (with or without a GPU) and which
  say nothing about the run, are filtered out of stderr while TensorFlow is
  imported; every other line of the import is written back;
* Python-side, absl and TensorFlow log WARNING and above, without the
  deprecation notices ("Instructions for updating: ...") TensorFlow's own
  tf.estimator and tf.compat.v1 code emits, each as a line of the command
  (`deepfm.train: warning: ...`, as a user error's `deepfm.train: error:
  ...`).

Every command line starts with `run`, whether it is started as `python -m
...` or as a console script: a user error (a bad, unknown or missing flag,
`absl.app.UsageError`, a bad value or file) ends the command with its
message and a one-line hint, without a usage dump or a traceback. A command
that needs no TensorFlow to check its flags fails before importing it.

`--verbosity 0` (absl's flag; 1 for debug) brings every line back: the C++
log level 0, no filter, Estimator's INFO lines, and for errors the user
caused absl's own report (its usage text, or the traceback). The tasks of
a multi-process job (parameter servers, Horovod) write to their own log
files, which also keep this package's INFO lines
(`configure_logging(task_logs=True)`).

This package imports neither TensorFlow nor any other package of the
project: every layer's command lines use it.
"""

import contextlib
import functools
import logging as std_logging
import os
import re
import sys
import tempfile
from typing import Callable, List, Optional, Sequence

# TensorFlow's C++ log level (0 all, 1 no INFO, 2 no INFO/WARNING, 3 no ERROR either).
TF_CPP_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
QUIET_TF_CPP_LEVEL = "2"
DETAILED_TF_CPP_LEVEL = "0"
# absl's --verbosity values: -1 WARNING (our default), 0 INFO, 1 DEBUG.
VERBOSITY_FLAG = "verbosity"
QUIET_VERBOSITY = -1
DETAIL_VERBOSITY = 0
# Lines TensorFlow 2.14 prints while it is imported, on any machine, that say
# nothing about the run: CUDA plugin double registration, GPU discovery,
# TensorRT's absence, the CPU-instructions notice.
IMPORT_NOISE = re.compile(
    r"Unable to register cu(DNN|FFT|BLAS) factory|Could not find cuda drivers|"
    r"TF-TRT Warning|cpu_feature_guard|To enable the following instructions|"
    r"This TensorFlow binary is optimized")
# TensorFlow's deprecation notices (tensorflow/python/util/deprecation.py).
DEPRECATION_MARKERS = ("Instructions for updating", "is deprecated and will be removed")
# The Estimator's step counter warns "It seems that global step ... has not been
# increased" when two runs read the same step. In TensorFlow 2.14's Estimator its
# read of the step is not ordered with the train op's increment, so a run that
# reads after the increment followed by one that reads before it warns while the
# step advances every run: a false alarm. A step that truly stops shows in the
# progress lines, and `--verbosity 0` shows the warning.
STALE_STEP_MARKER = "global step (tf.train.get_global_step) has not been increased"
QUIET_MARKERS = DEPRECATION_MARKERS + (STALE_STEP_MARKER,)
TENSORFLOW_LOGGER = "tensorflow"
# When a command imports TensorFlow: never; once its flags are parsed (a bad
# flag fails fast); or before its flags are defined (their definitions need it).
NO_TENSORFLOW = "no TensorFlow"
TENSORFLOW_AFTER_FLAGS = "TensorFlow after the flags"
TENSORFLOW_BEFORE_FLAGS = "TensorFlow before the flags"
TENSORFLOW_TIMINGS = (NO_TENSORFLOW, TENSORFLOW_AFTER_FLAGS, TENSORFLOW_BEFORE_FLAGS)
# The line after a user error's message.
ERROR_HINT = "(--help lists the flags; --verbosity 0 shows the details)"
EXIT_USER_ERROR = 1


def explicit_verbosity(argv: Sequence[str]) -> Optional[int]:
    """The `--verbosity` (or `-v`/`--v`) value on a command line, or None.

    Read before flags are parsed, because TensorFlow's C++ log level must be
    set before TensorFlow is imported. A value that is not an integer is left
    to the flag parser to report.
    """
    value = None
    args = list(argv[1:])
    for i, arg in enumerate(args):
        if arg == "--":
            break
        for name in ("--" + VERBOSITY_FLAG, "-" + VERBOSITY_FLAG, "--v", "-v"):
            if arg == name and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1:]
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def wants_detail(verbosity: Optional[int]) -> bool:
    """Whether `verbosity` asks for TensorFlow's full output (INFO or more)."""
    return verbosity is not None and verbosity >= DETAIL_VERBOSITY


def flags_want_detail() -> bool:
    """Whether the parsed `--verbosity` flag asks for TensorFlow's full output (call after parsing)."""
    from absl import flags
    given = flags.FLAGS[VERBOSITY_FLAG]
    return wants_detail(given.value if given.present else None)


def import_tensorflow(detail: bool, stderr_fd: int = 2):
    """Sets TensorFlow's C++ log level, then imports it with the import noise filtered.

    Args:
      detail: keep everything (`--verbosity` 0 or more).
      stderr_fd: the file descriptor TensorFlow's C++ runtime writes to.

    Returns:
      The `tensorflow` module.
    """
    if not os.environ.get(TF_CPP_LEVEL_ENV):
        os.environ[TF_CPP_LEVEL_ENV] = DETAILED_TF_CPP_LEVEL if detail else QUIET_TF_CPP_LEVEL
    if detail or "tensorflow" in sys.modules:
        import tensorflow as tf
        return tf
    with filtered_fd(stderr_fd, IMPORT_NOISE):
        import tensorflow as tf
    return tf


@contextlib.contextmanager
def filtered_fd(fd: int, noise: "re.Pattern"):
    """Captures what is written to `fd` inside the block, then writes back the lines not matching `noise`.

    Works on the file descriptor, so it also catches what C++ code writes.
    """
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture.read().decode("utf-8", errors="replace").splitlines(True)
                    if not noise.search(line)]
            if kept:
                os.write(fd, "".join(kept).encode("utf-8"))


class NoticeFilter(std_logging.Filter):
    """Drops TensorFlow's deprecation notices and the step counter's false alarm (`QUIET_MARKERS`)."""

    def filter(self, record: std_logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(marker in message for marker in QUIET_MARKERS)


class ConsoleFormatter(std_logging.Formatter):
    """A log record on a user's console, in the form of a user error's line: `<program>: warning: <message>`.

    Not absl's record (`W1130 02:56:04.759017 139756598270848
    run_config.py:146] ...`): its time, thread and source line say nothing
    to a user; `--verbosity 0` and a multi-process task's log keep them.
    """

    def __init__(self, program: str):
        super().__init__()
        self._program = program

    def format(self, record: std_logging.LogRecord) -> str:
        line = "%s: %s: %s" % (self._program, record.levelname.lower(), record.getMessage())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


# Whether `configure_logging` ran: then the process's logging is as it asked, and
# `drop_deprecation_notices` leaves it alone.
_configured = False
# The name of the command `run` started (the console's records name it); a script's own name otherwise.
_program: Optional[str] = None


def program_name() -> str:
    """The name a console line of this process starts with: the command's (`deepfm.train`), or the script's."""
    return _program or os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "python")


def drop_deprecation_notices() -> None:
    """Keeps TensorFlow's deprecation notices (and the step counter's false alarm) out of a script's output.

    What the Python API (`deepfm.train_and_evaluate`) does for a script of
    one's own, where the notices, about the TF1 APIs this library trains
    with, are a hundred lines no user can act on. Only `NoticeFilter` is
    added to the `tensorflow` logger: levels and handlers stay the
    script's. A no-op once `configure_logging` ran (`detail=True` brings
    the notices back).
    """
    tf_logger = std_logging.getLogger(TENSORFLOW_LOGGER)
    if _configured or any(isinstance(f, NoticeFilter) for f in tf_logger.filters):
        return
    tf_logger.addFilter(NoticeFilter())


def configure_logging(detail: bool, task_logs: bool = False) -> None:
    """Sets absl's and TensorFlow's Python log levels (call after flags are parsed).

    Quiet: WARNING and above, without deprecation notices and the step
    counter's false alarm (`NoticeFilter`), each a line of the command's
    own (`ConsoleFormatter`). Detail: absl's `--verbosity` as given,
    everything TensorFlow logs, in absl's records.

    Args:
      detail: the user asked for detail (`--verbosity` 0 or more).
      task_logs: this process is one task of a multi-process job (parameter
        servers, Horovod), whose output goes to its own log file (the local
        launcher's, SageMaker's per-host streams): this package's own INFO
        lines (cluster start-up, the end of training, ...) are kept there;
        TensorFlow's stay at WARNING; absl's records, as in any log file.
    """
    from absl import logging
    global _configured
    _configured = True
    tf_logger = std_logging.getLogger(TENSORFLOW_LOGGER)
    tf_logger.handlers = []  # absl's handler on the root logger prints TensorFlow's records.
    for old in [f for f in tf_logger.filters if isinstance(f, NoticeFilter)]:
        tf_logger.removeFilter(old)
    console = not (detail or task_logs)
    logging.get_absl_handler().setFormatter(ConsoleFormatter(program_name()) if console else logging.PythonFormatter())
    if detail:
        tf_logger.setLevel(std_logging.DEBUG)
        return
    logging.set_verbosity(logging.INFO if task_logs else logging.WARNING)
    tf_logger.setLevel(std_logging.WARNING)
    tf_logger.addFilter(NoticeFilter())


# Errors a user causes with bad flags, values or files: reported by their message alone.
def user_errors() -> tuple:
    """The exception types `run_main` reports without a traceback."""
    from absl import app
    errors: List[type] = [app.UsageError, ValueError, FileNotFoundError]
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        errors.append(tf.errors.InvalidArgumentError)
    return tuple(errors)


def error_message(error: BaseException) -> str:
    """The user-facing text of `error`: TensorFlow's op errors without their graph trace."""
    message = getattr(error, "message", None) or str(error)
    return message.split("\n\t [[")[0].strip()


def report_user_error(program: str, error: BaseException) -> None:
    """Writes `program: error: <message>` and the hint to stderr, then exits with `EXIT_USER_ERROR`."""
    sys.stdout.flush()
    sys.stderr.write("%s: error: %s\n%s\n" % (program, error_message(error), ERROR_HINT))
    sys.stderr.flush()
    raise SystemExit(getattr(error, "exitcode", None) or EXIT_USER_ERROR) from None


def run_main(main: Callable[[List[str]], object], argv: List[str], program: str,
             detail: Callable[[], bool]):
    """Runs `main(argv)`; a user-caused error ends the process with its message, not a traceback.

    Args:
      main: the entry point's main, run inside `absl.app.run`.
      argv: its arguments.
      program: the program's name, for the error line.
      detail: whether the user asked for detail (then the error propagates:
        absl reports it in full).

    Returns:
      What `main` returns (`absl.app.run` exits with it).
    """
    try:
        return main(argv)
    except user_errors() as e:
        if detail():
            raise
        report_user_error(program, e)
        return None


HELP_FLAGS = ("help", "helpshort", "?")
FULL_HELP_FLAG = "helpfull"
HELP_HINT = "Try --helpfull to get a list of all flags."


def requested_help(argv: Sequence[str]) -> Optional[str]:
    """`FULL_HELP_FLAG`, `HELP_FLAGS[0]` or None: the help flag on a command line (before `--`)."""
    for arg in argv[1:]:
        if arg == "--":
            break
        name = arg.lstrip("-").split("=", 1)[0] if arg.startswith("-") else None
        if name == FULL_HELP_FLAG and arg.partition("=")[2].lower() not in ("false", "0"):
            return FULL_HELP_FLAG
        if name in HELP_FLAGS and arg.partition("=")[2].lower() not in ("false", "0"):
            return HELP_FLAGS[0]
    return None


def help_text(main_module: str, full: bool, doc: Optional[str] = None) -> str:
    """The program's help: its module's docstring (or `doc`), then its flags (`full`: every flag).

    Written the same for `python -m <module>` and for the console script
    (absl's own `--help` lists the flags of `__main__`, which for a
    console script is pip's wrapper: none).
    """
    from absl import flags
    if doc is None:
        module = sys.modules.get(main_module)
        doc = (module.__doc__ if module else None) or ""
    doc = doc.strip()
    if full:
        listed = flags.FLAGS.get_help()
    else:
        # absl files the flags a module defines under its name; those of `python -m`'s
        # `__main__` under the script's path (sys.argv[0] when they were defined).
        key = sys.argv[0] if main_module == "__main__" else main_module
        listed = flags.FLAGS.module_help(key)
    return "%s\n\nflags:\n%s\n%s\n" % (doc, listed, "" if full else "\n" + HELP_HINT)


def parse_flags(argv: List[str], program: str, main_module: str = "__main__", doc: Optional[str] = None) -> List[str]:
    """Parses the command line with absl's flags; a flag error ends the process with its message alone.

    An unknown flag, a bad value, a missing required flag: `flags.Error`.
    With `--verbosity 0` absl reports it itself. `--help` (`--helpshort`,
    `-?`) and `--helpfull` print `help_text` to stdout and end the process
    with status 0, before any other flag is checked.

    Args:
      argv: the command line.
      program: the program's name, for the error line.
      main_module: the module of the program's main (whose flags `--help` lists).
      doc: what `--help` says first (default: `main_module`'s docstring).

    Returns:
      The arguments left after the flags.
    """
    from absl import app, flags
    wanted = requested_help(argv)
    if wanted is not None:
        sys.stdout.write(help_text(main_module, full=wanted == FULL_HELP_FLAG, doc=doc))
        sys.stdout.flush()
        raise SystemExit(0)
    if wants_detail(explicit_verbosity(argv)):
        return app.parse_flags_with_usage(argv)
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        report_user_error(program, e)
        return []


def module_of(main: Callable) -> str:
    """The name of the module that defines `main` (or the function a `functools.partial` wraps)."""
    while isinstance(main, functools.partial):
        main = main.func
    return getattr(main, "__module__", None) or "__main__"


def run(main: Callable[[List[str]], object], program: str, define_flags: Optional[Callable[[], None]] = None,
        tensorflow: str = NO_TENSORFLOW, argv: Optional[List[str]] = None, doc: Optional[str] = None) -> None:
    """Every command line's start: flags defined and parsed, `main` run, user errors reported plainly.

    The same for `python -m <module>` and for console scripts. A user error
    (see `parse_flags` and `user_errors`) ends the process with
    `<program>: error: <message>` and `ERROR_HINT` (exit status 1);
    `--verbosity 0` leaves it to absl. TensorFlow, when the command needs it,
    is imported with its start-up noise filtered (`import_tensorflow`).

    The steps, in this order:

    1. TensorFlow, for `TENSORFLOW_BEFORE_FLAGS`;
    2. the flags defined and parsed (`parse_flags`: a bad flag, or
       `--help`, ends the process here);
    3. TensorFlow, for `TENSORFLOW_AFTER_FLAGS`;
    4. `absl.app.run`, which starts absl (its log handler, its
       after-initialisation callbacks) and runs `main`.

    TensorFlow is always imported before step 4, never inside `main`:
    importing it registers an absl after-initialisation callback
    (`tf.distribute`'s test environment counts the GPUs). Once absl's app is
    initialised, absl runs such a callback at once, in the middle of
    TensorFlow's import, and the callback creates TensorFlow's eager context
    before the import has switched TensorFlow to its TF2 behaviour: that
    context keeps a TF1 (graph) base under every `tf.function`, so
    `tf.init_scope` builds graph tensors where it must run eagerly, and
    `tf.saved_model.load` of an Estimator export fails with "global_step ...
    is out of scope". (A shell with `TF2_BEHAVIOR=1` set hides this:
    TensorFlow then starts in TF2 behaviour from its first module.)

    Args:
      main: the program's `main(argv)` (argv: what the flags left); what it
        returns is the exit status.
      program: the program's name for the error line (`deepfm.train`).
      define_flags: defines the program's flags (None: they are defined).
      tensorflow: one of `TENSORFLOW_TIMINGS`: `NO_TENSORFLOW`,
        `TENSORFLOW_AFTER_FLAGS` (bad flags fail before the import) or
        `TENSORFLOW_BEFORE_FLAGS` (the flags' definitions need it).
      argv: the command line (default `sys.argv`).
      doc: what `--help` says first (default: the docstring of `main`'s module).
    """
    from absl import app
    global _program
    if tensorflow not in TENSORFLOW_TIMINGS:
        raise ValueError("tensorflow must be one of %s, got %r" % (TENSORFLOW_TIMINGS, tensorflow))
    _program = program
    argv = list(sys.argv if argv is None else argv)
    if tensorflow == TENSORFLOW_BEFORE_FLAGS:
        import_tensorflow(wants_detail(explicit_verbosity(argv)))
    if define_flags is not None:
        define_flags()
    app.define_help_flags()
    args = parse_flags(argv, program, module_of(main), doc)
    if tensorflow == TENSORFLOW_AFTER_FLAGS:
        import_tensorflow(flags_want_detail())
    app.run(lambda parsed: run_main(main, parsed, program, flags_want_detail), argv=argv,
            flags_parser=lambda _: args)
