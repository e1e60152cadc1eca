"""One Horovod rank of `tests/strategies/test_sharded_evaluation.py`: trains and evaluates with each strategy in turn.

The test starts it under horovodrun from the repository root::

    horovodrun --gloo -np 2 -H localhost:2 python -m tests.strategies.sharded_evaluation_rank \
        --strategies horovod,hybrid --result_dir D --model_dir M <deepfm.train flags>

For each strategy S of `--strategies`, in this order, it runs as
`tests.strategies.horovod_rank` does with `--strategy S --model_dir M/S
--result_dir D/S` (writing `D/S/rank-<R>.json`): one launch and one process
per rank for all the strategies, not one each (a launch and a TensorFlow
import per rank cost about 10 s of CPU). A strategy's run ends, its
evaluation logged, before the next one starts: each rank's
`<task> evaluated ...` lines come in the order of `--strategies`.
"""

import os

from absl import app, flags

from tests.strategies import horovod_rank

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The flags of `horovod_rank`, plus `--strategies`."""
    horovod_rank.define_flags()
    flags.DEFINE_list("strategies", None, "The strategies to train and evaluate with, in this order.")
    flags.mark_flag_as_required("strategies")


def main(argv):
    result_dir, model_dir = FLAGS.result_dir, FLAGS.model_dir
    for name in FLAGS.strategies:
        FLAGS.strategy = name
        FLAGS.result_dir = os.path.join(result_dir, name)
        FLAGS.model_dir = os.path.join(model_dir, name)
        horovod_rank.main(argv)


if __name__ == "__main__":
    define_flags()
    app.run(main)
