"""pytest configuration shared by the whole suite."""


def pytest_collection_modifyitems(config, items):
    """Drops `tf.test.TestCase.test_session`, a context manager, not a test."""
    items[:] = [item for item in items if item.name != "test_session"]
