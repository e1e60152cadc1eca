"""Command lines started as a user starts them: from a plain shell with the project's `.venv` activated.

Every test that starts a command line of this project (`python -m ...`, a
console script, a script of `examples/`, a shell line of the docs) starts it
through this module:

* **a minimal environment**, built from nothing: `PATH` with the virtual
  environment's `bin/` first (as `source .venv/bin/activate` leaves it, so
  `python` and the console scripts are the project's), `HOME`, `LANG`,
  `VIRTUAL_ENV`, plus only the variables the test names. Never the test
  process's own environment: importing TensorFlow puts `TF2_BEHAVIOR=1` into
  `os.environ`, which changes how TensorFlow starts in a child, and a user's
  shell has no `TF_CPP_MIN_LOG_LEVEL` and no `PYTHONPATH`;
* **a working directory** the test chooses (its temporary directory), with
  the relative paths the docs show (`data/synthetic`, `runs/m1`);
* **its own process group**, killed whole when the command outlives its
  time limit or the test fails, so no process is left behind.

`checkout` makes a working directory that looks like the project's root
for the commands the docs run from there (`examples/custom_model.py`,
`python -m benchmarks.train_single`): copies, never links, so that a
command (or a cleanup that follows links, as TensorFlow's removal of its
test directories does) can never write into or delete from the checkout.
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from typing import Dict, List, Mapping, Optional, Sequence, Union

from tests import paths

# The virtual environment whose Python runs the tests: its bin/ holds `python` and the console scripts.
VENV_BIN = os.path.dirname(os.path.abspath(sys.executable))
VENV_DIR = os.path.dirname(VENV_BIN)
# Variables of a user's plain shell that the commands may read, taken from this process (with defaults).
USER_VARIABLES = {"HOME": "/root", "LANG": "C.UTF-8"}
DEFAULT_TIMEOUT_S = 600
# What a test's working directory copies from the checkout: what the docs' commands read there.
# The packages are not among them: the virtual environment has them installed.
CHECKOUT_ENTRIES = ("examples", "benchmarks")
# Never copied: the committed results (a benchmark run from a test writes to an empty results/ of its own).
CHECKOUT_IGNORED = ("__pycache__", "*.pyc", "results")
BENCHMARK_RESULTS = os.path.join("benchmarks", "results")

# What a test names for a command that talks to the AWS API (a dry run, checked with botocore's Stubber):
# no credentials, no configuration file of this machine's user.
NO_AWS_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_CONFIG_FILE": "/nonexistent",
                      "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}

# TensorFlow's autograph imports the code it generates from the temporary directory, and Python caches its
# bytecode there (a user's shell has no PYTHONDONTWRITEBYTECODE): no file of the project's.
BYTECODE_CACHE = "__pycache__"
AUTOGRAPH_BYTECODE = re.compile(r"^__autograph_generated_file\w+\.cpython-\d+\.pyc$")

Command = Union[str, Sequence[str]]


def user_path() -> str:
    """`PATH` as an activated virtual environment has it: its bin/ first, then the user's own."""
    rest = [entry for entry in os.environ.get("PATH", os.defpath).split(os.pathsep)
            if entry and os.path.abspath(entry) != VENV_BIN]
    return os.pathsep.join([VENV_BIN] + rest)


def environment(extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment of a user's shell with `.venv` activated, plus `extra` (the test's own choice)."""
    env = {name: os.environ.get(name, default) for name, default in USER_VARIABLES.items()}
    env.update(PATH=user_path(), VIRTUAL_ENV=VENV_DIR)
    env.update(extra or {})
    return env


def python_module(module: str, *args: str) -> List[str]:
    """`python -m module args...`, `python` found on the user's `PATH` (the virtual environment's)."""
    return ["python", "-m", module] + list(args)


def _argv(command: Command) -> List[str]:
    """A list of arguments for a list, `bash -c` for a shell line."""
    if isinstance(command, str):
        return ["bash", "-c", "set -euo pipefail\n" + command]
    return list(command)


def describe(command: Command, result: subprocess.CompletedProcess, tail: int = 4000) -> str:
    """A failed command for an assertion message: the command, its status and the ends of its output."""
    shown = command if isinstance(command, str) else shlex.join(command)
    return "`%s` exited with %s\n--- stdout (end) ---\n%s\n--- stderr (end) ---\n%s" % (
        shown, result.returncode, (result.stdout or "")[-tail:], (result.stderr or "")[-tail:])


def kill_group(process: subprocess.Popen) -> None:
    """Kills the process group of `process` (started by `start`) and waits for `process`."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def start(command: Command, cwd: str, env: Optional[Mapping[str, str]] = None,
          **popen_args) -> subprocess.Popen:
    """Starts `command` (a list, or a shell line run by bash) in `cwd` in its own process group.

    Args:
      command: the arguments, or one shell line.
      cwd: the working directory (relative paths in `command` are relative to it).
      env: variables the test sets on purpose, on top of `environment()`.
      **popen_args: passed to `subprocess.Popen` (stdout, stderr, stdin, text).

    Returns:
      The process; end it with `kill_group` if the test does not wait for it.
    """
    return subprocess.Popen(_argv(command), cwd=cwd, env=environment(env), start_new_session=True,
                            **popen_args)


def run(command: Command, cwd: str, env: Optional[Mapping[str, str]] = None, timeout: float = DEFAULT_TIMEOUT_S,
        input: Optional[str] = None) -> subprocess.CompletedProcess:
    """Runs `command` as a user would (see `start`) and returns its status and output (text).

    The whole process group is killed if the command outlives `timeout`
    (then `subprocess.TimeoutExpired` is raised) or the wait is interrupted.
    """
    process = start(command, cwd, env, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(input=input, timeout=timeout)
    except BaseException:
        kill_group(process)
        process.communicate()
        raise
    finally:
        # A command's own children left running (a daemon it forgot) are the test's to end.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return subprocess.CompletedProcess(_argv(command), process.returncode, stdout, stderr)


def left_in(directory: str) -> List[str]:
    """What commands left in `directory` (their TMPDIR), sorted, without autograph's bytecode cache."""
    left = []
    for name in sorted(os.listdir(directory)):
        cache = os.path.join(directory, name)
        if name == BYTECODE_CACHE and all(AUTOGRAPH_BYTECODE.match(entry) for entry in os.listdir(cache)):
            continue
        left.append(name)
    return left


def checkout(directory: str) -> str:
    """Makes `directory` look like the project's root for the docs' commands, and returns it.

    `CHECKOUT_ENTRIES` are copied (never linked: nothing a command or a
    cleanup does there reaches the checkout), with an empty
    `benchmarks/results/`; `data/` and `runs/`, which the commands write,
    are the directory's own.
    """
    os.makedirs(directory, exist_ok=True)
    for name in CHECKOUT_ENTRIES:
        target = os.path.join(directory, name)
        if not os.path.exists(target):
            shutil.copytree(os.path.join(paths.REPO_ROOT, name), target,
                            ignore=shutil.ignore_patterns(*CHECKOUT_IGNORED))
    os.makedirs(os.path.join(directory, BENCHMARK_RESULTS), exist_ok=True)
    return directory


def flag_value(argv: Sequence[str], flag: str) -> str:
    """The value of the last `flag VALUE` in `argv` (absl's flags: the last one wins)."""
    return argv[len(argv) - 1 - list(argv)[::-1].index(flag) + 1]
