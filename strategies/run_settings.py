"""`RunSettings`: what a strategy agreed on for one training run, and the Estimator settings of it.

`Strategy.prepare(plan)` builds it once; `Strategy.run` reads it afterwards.
The trainer builds its Estimator and trains from it::

    strategy.prepare(strategies.Plan(model_dir="runs/m1", steps_per_worker=1000))
    run = strategy.run
    estimator = tf.estimator.Estimator(strategy.wrap_model_fn(model_fn), config=run.run_config)
    estimator.train(input_fn, hooks=list(run.train_hooks), max_steps=run.max_steps)
"""

import dataclasses
from typing import Optional, Tuple

import tensorflow as tf

from strategies import lifecycle


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What `Strategy.prepare` agreed on, and how this process's Estimator runs the plan.

    Attributes:
      plan: the plan `prepare` took.
      max_steps: the global step at which training stops (the plan's, else
        `InputPlan.global_max_steps` of its steps); None: at the end of the
        input.
      start_step: the global step training starts from: the chief's resume
        step, the same on every process in lockstep.
      checkpoint_dir: where this process's Estimator checkpoints (Horovod's
        other ranks: a private directory).
      run_config: the Estimator `RunConfig` of the plan: checkpoints,
        summaries, seed, session, placement.
      train_hooks: the hooks this strategy adds to training.
    """

    plan: lifecycle.Plan
    max_steps: Optional[int]
    start_step: int
    checkpoint_dir: str
    run_config: tf.estimator.RunConfig
    train_hooks: Tuple[tf.estimator.SessionRunHook, ...] = ()
