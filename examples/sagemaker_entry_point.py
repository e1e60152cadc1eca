"""Entry point of an Amazon SageMaker TensorFlow 2.14 training job.

SageMaker's training toolkit runs `python sagemaker_entry_point.py --name
value ...` (one pair per hyperparameter) from the root of the source
directory, where this project's packages sit beside this script. Under MPI
(`distribution={"mpi": ...}`) every rank runs it; with parameter servers,
every host.

Two steps:

1. The container's environment becomes `deepfm.train` flags
   (`jobs.sagemaker.env.training_args` has the table): the channels'
   directories, the model and output directories, the checkpoint location,
   the distribution (horovod or ps) and the cores. The hyperparameters
   follow, so they win; any `deepfm.train` flag is a hyperparameter.
2. `deepfm.train.run` parses those flags into `deepfm.TrainConfig`,
   `ModelConfig`, `PipelineConfig` and `StrategyConfig` and trains through
   `deepfm.train_and_evaluate` (docs/api.md), with the command line's
   console output, which SageMaker's metric definitions read.

To train a model_fn of your own in a SageMaker job, put its module and an
entry point of three lines beside this one in your source directory (the
SDK's `source_dir`)::

    import my_model
    import sagemaker_entry_point
    sagemaker_entry_point.main(model_fn=my_model.model_fn)

Run a job locally, on emulated hosts, with SageMaker's real toolkit::

    python -m deepfm.sagemaker local --instance_count 2 --distribution mpi \\
        --channel train=data/synthetic --output_dir runs/sm -- --num_epochs 1

or submit the same job with `python -m deepfm.sagemaker submit`
(`examples/submit_with_sdk.py` builds one with the SageMaker SDK itself).
"""

import os
import sys

from jobs.sagemaker import env as sagemaker_env


def main(model_fn=None) -> None:
    """Trains as the container and the hyperparameters say.

    Args:
      model_fn: a model_fn of your own (see docs/api.md); None trains the
        built-in model the `model` hyperparameter names (`deepfm` or `dcn`).
    """
    try:
        args = sagemaker_env.training_args(os.environ, sys.argv[1:])
    except sagemaker_env.ContractError as e:
        sys.exit("sagemaker_entry_point: %s" % e)
    # Imported here: the mapping above needs no TensorFlow, and fails fast.
    from deepfm import train
    train.run([sys.argv[0]] + args, model_fn=model_fn)


if __name__ == "__main__":
    main()
