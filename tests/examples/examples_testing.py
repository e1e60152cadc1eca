"""What the tests of `examples/` share: the examples' paths, importing and running them, tiny data."""

import importlib
import os
import subprocess
import sys

import tensorflow as tf

from dataprep import synthetic
from input_pipeline import schema
from tests import command_line, paths

EXAMPLES_DIR = os.path.join(paths.REPO_ROOT, "examples")
# A small planted dataset: every strategy's share of it trains in a few dozen steps.
ROWS = 6_000
FEATURE_SIZE = 500
SHARDS = 2
SEED = 5
# Flags of examples/train_from_python.py (and so of examples/custom_model.py) for a tiny model.
TINY_MODEL_ARGS = ["--batch_size", "64", "--learning_rate", "0.01", "--embedding_size", "4", "--deep_layers", "16",
                   "--seed", "1"]
RUN_TIMEOUT_S = 300


def example_path(name: str) -> str:
    """The path of `examples/<name>.py`."""
    return os.path.join(EXAMPLES_DIR, name + ".py")


def import_example(name: str):
    """Imports `examples/<name>.py` as the module `name`.

    The examples are scripts, which import each other by file name (the
    directory of a script run by `python` is on `sys.path`), so their
    directory goes on `sys.path` here too.
    """
    if EXAMPLES_DIR not in sys.path:
        sys.path.insert(0, EXAMPLES_DIR)
    return importlib.import_module(name)


def checkout() -> str:
    """A working directory laid out like the project's root (`examples/` in it), one per test process."""
    return command_line.checkout(os.path.join(tf.compat.v1.test.get_temp_dir(), "examples_checkout"))


def run_example(name: str, args, timeout: float = RUN_TIMEOUT_S, **extra_env) -> subprocess.CompletedProcess:
    """Runs `python examples/<name>.py <args>` from a directory like the project's root, as a user would.

    The project is importable as the virtual environment installed it (no
    `PYTHONPATH`); `extra_env` names the variables the test sets on
    purpose. When it runs past `timeout`, it is killed with every process
    it started.

    Raises:
      subprocess.TimeoutExpired: it ran past `timeout`.
    """
    return command_line.run(["python", "examples/%s.py" % name] + list(args), checkout(), env=extra_env,
                            timeout=timeout)


def shared_dataset() -> str:
    """The root of a small synthetic dataset, written once per test process."""
    root = os.path.join(tf.compat.v1.test.get_temp_dir(), "examples_data")
    if not os.path.exists(os.path.join(root, schema.METADATA_FILE)):
        synthetic.generate(ROWS, root, feature_size=FEATURE_SIZE, seed=SEED, shards=SHARDS)
    return root
