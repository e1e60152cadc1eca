"""pytest configuration shared by the whole suite."""

import os
import shutil
import tempfile

# Every run ends with the tests of most CPU (tests/cpu_report.py); the slow test classes run first
# (tests/scheduling.py).
pytest_plugins = ["tests.cpu_report", "tests.scheduling"]

# absl's default test directory is named after the main module, which is
# `<string>` in a pytest-xdist worker: a path no shell command survives.
TEST_TMPDIR_VARIABLE = "TEST_TMPDIR"
_created_tmpdir = None


def pytest_collection_modifyitems(config, items):
    """Drops `tf.test.TestCase.test_session`, a context manager, not a test."""
    items[:] = [item for item in items if item.name != "test_session"]


def pytest_configure(config):
    """Gives absl a plain test directory; marks absl flags parsed, as `tf.test.main` would, so
    `create_tempdir` works."""
    global _created_tmpdir
    if TEST_TMPDIR_VARIABLE not in os.environ:
        _created_tmpdir = tempfile.mkdtemp(prefix="deepfm-tests-")
        os.environ[TEST_TMPDIR_VARIABLE] = _created_tmpdir
    from absl import flags
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def pytest_unconfigure(config):
    """Removes the test directory `pytest_configure` created."""
    if _created_tmpdir is not None:
        shutil.rmtree(_created_tmpdir, ignore_errors=True)
