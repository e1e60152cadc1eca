"""One Horovod rank of a test training job, recording what the tests compare.

`tests/strategies/test_horovod.py` starts it under horovodrun from the
repository root::

    horovodrun --gloo -np 2 -H localhost:2 python -m tests.strategies.horovod_rank \
        --result_dir D <deepfm.train flags> --strategy horovod

It trains like `python -m deepfm.train`, then writes `D/rank-<R>.json`:
the `TrainResult` fields, the rank and size, the directory the rank's
Estimator checkpointed to, and a SHA-256 digest of every variable in that
directory's final checkpoint.
"""

import dataclasses
import hashlib
import json
import os

import numpy as np
import tensorflow as tf
from absl import app, flags

from deepfm import train as train_main

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The flags of `deepfm.train`, plus `--result_dir`."""
    train_main.define_flags()
    flags.DEFINE_string("result_dir", None, "Where rank-<R>.json goes.")
    flags.mark_flag_as_required("result_dir")


def variables_digest(checkpoint_dir: str) -> str:
    """SHA-256 over the names, shapes and bytes of every variable of the latest checkpoint."""
    checkpoint = tf.train.latest_checkpoint(checkpoint_dir)
    if checkpoint is None:
        raise ValueError("no checkpoint in %s" % checkpoint_dir)
    digest = hashlib.sha256()
    for name, shape in sorted(tf.train.list_variables(checkpoint)):
        digest.update(("%s %s\n" % (name, shape)).encode())
        digest.update(np.ascontiguousarray(tf.train.load_variable(checkpoint, name)).tobytes())
    return digest.hexdigest()


def _numpy_scalar(value):
    """JSON form of the numpy scalars a result may hold (e.g. the global step)."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError("%r is not JSON serializable" % (value,))


def main(argv):
    del argv
    import strategies
    from deepfm.runtime import trainer

    job, _ = train_main.parse_job(FLAGS)
    strategy = strategies.get(job.strategy)
    result = trainer.run(job, strategy)
    record = dataclasses.asdict(result)
    topology = strategy.topology
    record.update(rank=topology.rank, size=topology.workers, is_chief=topology.is_chief,
                  checkpoint_dir=strategy.run.checkpoint_dir,
                  variables_digest=variables_digest(strategy.run.checkpoint_dir))
    os.makedirs(FLAGS.result_dir, exist_ok=True)
    with open(os.path.join(FLAGS.result_dir, "rank-%d.json" % topology.rank), "w") as f:
        json.dump(record, f, indent=1, sort_keys=True, default=_numpy_scalar)


if __name__ == "__main__":
    define_flags()
    app.run(main)
