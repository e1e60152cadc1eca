"""The training's console lines as SageMaker metrics: the regular expressions a job's log is read with.

SageMaker reads a training job's metrics from its log: each metric
definition is a name and a regular expression, searched in every line, whose
first group is the value. The SageMaker console and CloudWatch plot the
series, and a hyperparameter tuning job's objective is one of them. The
expressions match what `deepfm.train` prints (only the chief prints):

* the progress line (`deepfm.runtime.console.format_progress`), every
  `--log_every_n_steps`: `step 300/2634 | epoch 1/3 | 88429 ex/s | loss 0.4712 | ...`
  (`step 300/? | ...` when the end is unknown, as in Pipe mode);
* each evaluation during training
  (`deepfm.runtime.early_stopping.report_evaluation`):
  `validation at step 400: AUC 0.7712, logloss 0.4686 (best so far)`;
* the summary at the end (`deepfm.runtime.trainer.summary`):
  `validation AUC:        0.7712` and `validation logloss:    0.4686`.

Horovod's ranks print through `mpirun --tag-output`, which prefixes each
line (`[1,0]<stdout>:`): the expressions are not anchored.

`series` applies the same expressions to a log, as SageMaker does; `deepfm.sagemaker
local` writes what it finds in each host's log. This module imports neither
TensorFlow nor the SageMaker SDK.
"""

import re
from typing import Dict, Iterable, List

TRAIN_LOSS = "train:loss"
TRAIN_EXAMPLES_PER_SEC = "train:examples_per_sec"
VALIDATION_AUC = "validation:auc"
VALIDATION_LOGLOSS = "validation:logloss"
# A plain decimal number (SageMaker converts the first group to a float).
NUMBER = r"([0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"
METRIC_DEFINITIONS = (
    {"Name": TRAIN_LOSS, "Regex": r"step [0-9]+/(?:[0-9]+|\?) .*\| loss " + NUMBER},
    {"Name": TRAIN_EXAMPLES_PER_SEC, "Regex": r"step [0-9]+/(?:[0-9]+|\?) .*\| " + NUMBER + r" ex/s \|"},
    {"Name": VALIDATION_AUC, "Regex": r"validation (?:at step [0-9]+: )?AUC:?\s+" + NUMBER},
    {"Name": VALIDATION_LOGLOSS, "Regex": r"validation (?:at step [0-9]+: AUC [0-9.]+, )?logloss:?\s+" + NUMBER},
)
# The objective of a tuning job: the validation AUC, the higher the better.
OBJECTIVE_METRIC = VALIDATION_AUC
OBJECTIVE_TYPE = "Maximize"


def series(lines: Iterable[str], definitions=METRIC_DEFINITIONS) -> Dict[str, List[float]]:
    """Each metric's values in the order `lines` hold them, as SageMaker reads a log.

    Args:
      lines: the log's lines.
      definitions: `{"Name", "Regex"}` metric definitions.

    Returns:
      Metric name -> its values (metrics found nowhere are left out).
    """
    compiled = [(definition["Name"], re.compile(definition["Regex"])) for definition in definitions]
    found: Dict[str, List[float]] = {}
    for line in lines:
        for name, pattern in compiled:
            match = pattern.search(line)
            if match:
                found.setdefault(name, []).append(float(match.group(1)))
    return found
