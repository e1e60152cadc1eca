"""`jobs.sagemaker_local` moved to `jobs.sagemaker.local`: an alias that warns; it will be removed."""

from jobs import _moved

_MODULES = _moved.follow("jobs.sagemaker_local", ("jobs.sagemaker.local",), __name__)


def __getattr__(name: str) -> object:
    return _moved.lookup(_MODULES, "jobs.sagemaker_local", name)
