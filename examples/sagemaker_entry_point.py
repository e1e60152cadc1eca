"""Entry point of an Amazon SageMaker TensorFlow 2.14 training job.

SageMaker's training toolkit runs `python sagemaker_entry_point.py --name
value ...` (one pair per hyperparameter) from the root of the source
directory, where this project's packages sit beside this script. The
container's environment and the hyperparameters become `deepfm.train`
flags (`jobs.sagemaker_env.training_args` has the table); hyperparameters
win. Under MPI (`distribution={"mpi": ...}`) every rank runs this script.

Run a job locally, on emulated hosts, with SageMaker's real toolkit::

    python -m deepfm.sagemaker local --instance_count 2 --distribution mpi \\
        --channel train=data/synthetic --output_dir runs/sm -- --num_epochs 1

or submit the same job with `python -m deepfm.sagemaker submit`.
"""

import os
import sys

from jobs import sagemaker_env


def main() -> None:
    try:
        args = sagemaker_env.training_args(os.environ, sys.argv[1:])
    except sagemaker_env.ContractError as e:
        sys.exit("sagemaker_entry_point: %s" % e)
    from deepfm import train
    sys.argv = sys.argv[:1] + args
    train.run()


if __name__ == "__main__":
    main()
