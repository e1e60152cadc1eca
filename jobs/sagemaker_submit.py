"""`jobs.sagemaker_submit` moved to `jobs.sagemaker.submit`: an alias that warns; it will be removed."""

from jobs import _moved

_MODULES = _moved.follow("jobs.sagemaker_submit", ("jobs.sagemaker.submit",), __name__)


def __getattr__(name: str) -> object:
    return _moved.lookup(_MODULES, "jobs.sagemaker_submit", name)
