"""`jobs.sagemaker_processing` moved to `jobs.sagemaker.processing` (the conversion) and
`jobs.sagemaker.processing_job` (one job): an alias that warns; it will be removed."""

from jobs import _moved

_MODULES = _moved.follow("jobs.sagemaker_processing", ("jobs.sagemaker.processing", "jobs.sagemaker.processing_job"),
                         __name__)


def __getattr__(name: str) -> object:
    return _moved.lookup(_MODULES, "jobs.sagemaker_processing", name)
