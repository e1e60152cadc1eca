"""`jobs.sagemaker_metrics` moved to `jobs.sagemaker.metrics`: an alias that warns; it will be removed."""

from jobs import _moved

_MODULES = _moved.follow("jobs.sagemaker_metrics", ("jobs.sagemaker.metrics",), __name__)


def __getattr__(name: str) -> object:
    return _moved.lookup(_MODULES, "jobs.sagemaker_metrics", name)
