"""What the tests of `examples/` share: the examples' paths, importing and running them, tiny data."""

import importlib
import os
import subprocess
import sys

import psutil
import tensorflow as tf

from dataprep import synthetic
from input_pipeline import schema
from tests import paths

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


def environment(**extra) -> dict:
    """The environment an example runs in: this checkout importable, TensorFlow's C++ INFO lines off."""
    pythonpath = os.pathsep.join(p for p in (paths.REPO_ROOT, os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=pythonpath, TF_CPP_MIN_LOG_LEVEL="2", **extra)


def run_example(name: str, args, timeout: float = RUN_TIMEOUT_S, **extra_env) -> subprocess.CompletedProcess:
    """Runs `python examples/<name>.py <args>` from the repository root, as a user would.

    When it runs past `timeout`, it is killed with every process it
    started.

    Raises:
      subprocess.TimeoutExpired: it ran past `timeout`.
    """
    argv = [sys.executable, example_path(name)] + list(args)
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=paths.REPO_ROOT,
                               env=environment(**extra_env))
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(process.pid).children(recursive=True):
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        process.kill()
        process.wait()
        raise
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def shared_dataset() -> str:
    """The root of a small synthetic dataset, written once per test process."""
    root = os.path.join(tf.compat.v1.test.get_temp_dir(), "examples_data")
    if not os.path.exists(os.path.join(root, schema.METADATA_FILE)):
        synthetic.generate(ROWS, root, feature_size=FEATURE_SIZE, seed=SEED, shards=SHARDS)
    return root
