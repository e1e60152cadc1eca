"""`jobs.sagemaker_job` moved: the job to `jobs.spec`, the container's files to `jobs.sagemaker.container`, the
source archives to `jobs.source`. An alias that warns; it will be removed."""

from typing import Dict, Optional

from jobs import _moved
from jobs import spec as _spec
from jobs.sagemaker import container as _container
from jobs.sagemaker import submit as _submit

_MODULES = _moved.follow("jobs.sagemaker_job", ("jobs.spec", "jobs.sagemaker.container", "jobs.source"), __name__)


class JobSpec(_spec.JobSpec):
    """`jobs.spec.JobSpec` with the two SageMaker methods it had; they are functions now."""

    def distribution_hyperparameters(self) -> Dict[str, object]:
        """Moved to `jobs.sagemaker.container.distribution_hyperparameters(spec)`."""
        return _container.distribution_hyperparameters(self)

    def sdk_distribution(self) -> Optional[Dict[str, dict]]:
        """Moved to `jobs.sagemaker.submit.sdk_distribution(spec)`."""
        return _submit.sdk_distribution(self)


def __getattr__(name: str) -> object:
    return _moved.lookup(_MODULES, "jobs.sagemaker_job", name)
