"""Entry point of an Amazon SageMaker TensorFlow training job.

SageMaker runs `python sagemaker_entry_point.py --hyperparameter value ...` in
the TensorFlow 2.14 training container with this project installed (for
example from `requirements.txt` in `source_dir`). This script turns the
container's environment into `deepfm.train` flags and runs it:

| environment            | flag               |
|------------------------|--------------------|
| `SM_CHANNEL_TRAIN`     | `--train_data`     |
| `SM_CHANNEL_VALIDATION`| `--val_data`       |
| `SM_MODEL_DIR`         | `--export_dir`     |
| `SM_OUTPUT_DATA_DIR`   | `--metrics_file` (`metrics.json` inside it) |

Hyperparameters come after these, so any of them set explicitly wins.
`model_dir` (the checkpoint path, on S3 or a shared file system for
parameter servers) is passed by the SageMaker TensorFlow estimator itself.
The strategy is a hyperparameter: `strategy: horovod` with the estimator's
`distribution={"mpi": {"enabled": True, "processes_per_host": N}}`, or
`strategy: ps` with `distribution={"parameter_server": {"enabled": True}}`
(the container sets `TF_CONFIG`). Pipe mode: `input_mode: pipe` and
`train_channels: train_0,train_1,...`, one channel per worker on a host.
"""

import os
import sys
from typing import List, Mapping

CHANNEL_FLAGS = (("SM_CHANNEL_TRAIN", "--train_data"), ("SM_CHANNEL_VALIDATION", "--val_data"),
                 ("SM_MODEL_DIR", "--export_dir"))
METRICS_FILE = "metrics.json"


def sagemaker_args(environ: Mapping[str, str]) -> List[str]:
    """The `deepfm.train` flags that SageMaker's environment implies."""
    args = []
    for variable, flag in CHANNEL_FLAGS:
        if environ.get(variable):
            args += [flag, environ[variable]]
    if environ.get("SM_OUTPUT_DATA_DIR"):
        args += ["--metrics_file", os.path.join(environ["SM_OUTPUT_DATA_DIR"], METRICS_FILE)]
    return args


def main() -> None:
    from deepfm import train
    sys.argv = sys.argv[:1] + sagemaker_args(os.environ) + sys.argv[1:]
    train.run()


if __name__ == "__main__":
    main()
