"""`jobs.sagemaker_env` moved to `jobs.sagemaker.env`: an alias that warns; it will be removed."""

from jobs import _moved

_MODULES = _moved.follow("jobs.sagemaker_env", ("jobs.sagemaker.env",), __name__)


def __getattr__(name: str) -> object:
    return _moved.lookup(_MODULES, "jobs.sagemaker_env", name)
