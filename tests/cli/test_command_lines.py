"""Every command line ends a user error with its message and a hint, started either way.

Each entry point runs as `python -m <module>` and as its console script (the
one pip installed into the virtual environment's bin/ for `setup.cfg`'s
`console_scripts`; an entry point without one, through a wrapper written
the way pip writes them), as a user starts them (`tests.command_line`), with
an unknown flag, a bad value and a missing (or misplaced) argument. The
error must be the message alone (`<program>: error: ...`) plus
`cli.entry.ERROR_HINT`: no usage text, no traceback. `PYTHONPROFILEIMPORTTIME`
(Python's `-X importtime`, named on purpose) tells which runs imported
TensorFlow: every entry point but `deepfm.train` (whose flags' definitions
need it) fails before importing it. `--help` lists the program's flags and
exits 0, either way.
"""

import concurrent.futures
import configparser
import dataclasses
import os
import re
from typing import Dict, List, Tuple

import pytest

from cli import entry
from tests import command_line, paths

SETUP_CFG = os.path.join(paths.REPO_ROOT, "setup.cfg")
# The wrapper pip writes for a console script (pip's `get_console_script` template).
CONSOLE_SCRIPT = """\
import re
import sys
from {module} import {function}
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit({function}())
"""
IMPORT_TIME = {"PYTHONPROFILEIMPORTTIME": "1"}
IMPORT_TIME_LINE = re.compile(r"^import time:")
TENSORFLOW_IMPORTED = re.compile(r"^import time:.*\|\s+tensorflow$", re.MULTILINE)
TIMEOUT_S = 120
UNKNOWN_FLAG = "--no_such_flag=1"


@dataclasses.dataclass(frozen=True)
class EntryPoint:
    """A command line and the three user errors it is tried with.

    Attributes:
      module: the module `python -m` runs (and whose `run()` the console script calls).
      script: its console script in setup.cfg, if it has one.
      bad_value: (arguments, a fragment of the message).
      missing: (arguments, a fragment of the message): a required flag or
        argument left out (or, for the launcher, which has none, a flag
        given where it does not belong).
      imports_tensorflow: whether its flags' definitions need TensorFlow.
    """

    module: str
    script: str
    bad_value: Tuple[Tuple[str, ...], str]
    missing: Tuple[Tuple[str, ...], str]
    imports_tensorflow: bool = False


ENTRY_POINTS = (
    EntryPoint("deepfm.train", "deepfm-train", (("--strategy", "bogus"), "--strategy=bogus"),
               ((), "--model_dir"), imports_tensorflow=True),
    EntryPoint("deepfm.predict", "deepfm-predict", (("--batch_size", "many"), "--batch_size=many"),
               (("--data", "x", "--output", "y"), "--saved_model")),
    EntryPoint("deepfm.launch", "deepfm-launch", (("--strategy", "ps", "--num_ps", "0"), "--num_ps must be >= 1"),
               (("--", "--strategy", "ps"), "the launcher sets --strategy itself")),
    EntryPoint("deepfm.sagemaker", "deepfm-sagemaker", (("local", "--distribution", "bogus"), "--distribution=bogus"),
               (("submit",), "submit needs --role")),
    EntryPoint("deepfm.kubernetes", "deepfm-kubernetes",
               (("render", "--instance_count", "two"), "--instance_count=two"),
               (("render", "--output_dir", "x"), "--image is required")),
    EntryPoint("deepfm.advise", "deepfm-advise", (("--hosts", "two"), "--hosts=two"), ((), "--data")),
    EntryPoint("dataprep.criteo", "criteo-convert", (("--libsvm_layout", "wide"), "--libsvm_layout=wide"),
               ((), "--output_dir")),
    EntryPoint("dataprep.synthetic", "criteo-synthetic", (("--rows", "lots"), "--rows=lots"),
               (("--output_dir", "x"), "--rows")),
    EntryPoint("dataprep.libsvm_to_tfrecord", "libsvm-to-tfrecord", (("--field_size", "wide"), "--field_size=wide"),
               ((), "--input")),
    EntryPoint("dataprep.raw_criteo", "", (("--rows", "lots"), "--rows=lots"), (("--rows", "3"), "--output")),
    EntryPoint("dataprep.criteo_processing", "", (("count", "--libsvm_layout", "wide"), "--libsvm_layout=wide"),
               ((), "expected one stage")),
    EntryPoint("input_pipeline.pipe_feeder", "pipe-feeder",
               (("--base_dir", "x", "--channel", "train=x", "--epochs", "0"), "--epochs=0"),
               (("--channel", "train=x"), "--base_dir")),
    EntryPoint("jobs.sagemaker.processing", "criteo-processing", (("bogus",), "expected one command"),
               ((), "expected one command")),
)
BY_MODULE = {point.module: point for point in ENTRY_POINTS}
CASES = [(point.module, kind) for point in ENTRY_POINTS for kind in ("unknown_flag", "bad_value", "missing")]


def console_scripts() -> Dict[str, str]:
    """setup.cfg's console scripts: name -> `module:function`."""
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    found = {}
    for line in parser["options.entry_points"]["console_scripts"].strip().splitlines():
        name, _, target = line.partition("=")
        found[name.strip()] = target.strip()
    return found


def console_script(directory: str, point: EntryPoint) -> List[str]:
    """How a user starts `point`'s console script: its name, found on `PATH` (the virtual environment's).

    An entry point without a console script gets a wrapper in `directory`,
    written the way pip writes them, run with `python`.
    """
    if point.script:
        return [point.script]
    path = os.path.join(directory, point.module.replace(".", "-"))
    with open(path, "w") as f:
        f.write(CONSOLE_SCRIPT.format(module=point.module, function="run"))
    return ["python", path]


def run(argv, cwd) -> Tuple[int, str, str, bool]:
    """(exit status, stdout, stderr without the import times, whether TensorFlow was imported)."""
    result = command_line.run(list(argv), cwd, env=IMPORT_TIME, timeout=TIMEOUT_S)
    stderr = "".join(line for line in result.stderr.splitlines(True) if not IMPORT_TIME_LINE.match(line))
    return result.returncode, result.stdout, stderr, bool(TENSORFLOW_IMPORTED.search(result.stderr))


def case_arguments(point: EntryPoint, kind: str) -> Tuple[Tuple[str, ...], str]:
    if kind == "unknown_flag":
        return (UNKNOWN_FLAG,), "Unknown command line flag 'no_such_flag'"
    return point.bad_value if kind == "bad_value" else point.missing


@pytest.mark.parametrize("module,kind", CASES, ids=["%s-%s" % case for case in CASES])
def test_a_user_error_ends_with_its_message_and_a_hint_either_way(module, kind, tmp_path):
    point = BY_MODULE[module]
    args, fragment = case_arguments(point, kind)
    ways = {"python -m": command_line.python_module(module), "console script": console_script(str(tmp_path), point)}
    with concurrent.futures.ThreadPoolExecutor(len(ways)) as pool:
        results = dict(zip(ways, pool.map(lambda start: run(start + list(args), str(tmp_path)), ways.values())))
    for way, (code, out, err, imported_tensorflow) in results.items():
        where = "%s (%s): stdout %r, stderr %r" % (module, way, out[-2000:], err[-3000:])
        lines = err.splitlines()
        assert code == entry.EXIT_USER_ERROR, where
        assert lines[0].startswith("%s: error: " % module), where
        assert fragment in lines[0], where
        assert lines[-1] == entry.ERROR_HINT, where
        # The message may take more than one line (absl lists every missing flag), never the usage text.
        assert len(lines) <= 3, where
        assert "Traceback" not in err and "USAGE" not in err and "flags:" not in err, where
        assert out == "", where
        assert imported_tensorflow == point.imports_tensorflow, where


def test_every_console_script_is_an_entry_point_tried_here():
    scripts = console_scripts()
    for name, target in scripts.items():
        module, _, function = target.partition(":")
        assert function == "run", target
        assert module in BY_MODULE and BY_MODULE[module].script == name, (
            "console script %s = %s is not among the entry points tried" % (name, target))
    assert {point.script for point in ENTRY_POINTS if point.script} == set(scripts)


def test_verbosity_leaves_the_error_to_absl_with_its_details(tmp_path):
    code, _, err, _ = run(command_line.python_module("deepfm.sagemaker", "submit", "--verbosity", "0"), tmp_path)
    assert code == entry.EXIT_USER_ERROR
    assert "submit needs --role" in err
    assert "flags:" in err, err[-2000:]  # absl's usage text: the details
    code, _, err, _ = run(command_line.python_module("deepfm.advise", UNKNOWN_FLAG, "--verbosity=0"), tmp_path)
    assert code == entry.EXIT_USER_ERROR
    assert "FATAL Flags parsing error" in err, err[-2000:]


@pytest.mark.parametrize("module", sorted(BY_MODULE))
def test_help_lists_the_flags_and_exits_0_either_way(module, tmp_path):
    point = BY_MODULE[module]
    ways = {"python -m": command_line.python_module(module), "console script": console_script(str(tmp_path), point)}
    for way, start in ways.items():
        code, out, err, _ = run(start + ["--help"], str(tmp_path))
        where = "%s (%s): stdout %r, stderr %r" % (module, way, out[-2000:], err[-2000:])
        assert code == 0, where
        assert "\nflags:\n" in out and "\n  --" in out, where  # at least one flag of the program
