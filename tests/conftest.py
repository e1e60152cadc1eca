"""pytest configuration shared by the whole suite."""


def pytest_collection_modifyitems(config, items):
    """Drops `tf.test.TestCase.test_session`, a context manager, not a test."""
    items[:] = [item for item in items if item.name != "test_session"]


def pytest_configure(config):
    """Marks absl flags parsed, as `tf.test.main` would, so `create_tempdir` works."""
    from absl import flags
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
