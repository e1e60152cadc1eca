"""The lifecycle of a strategy: built, set up, prepared from a `Plan`, each step once and explicit.

    strategy = strategies.get(config)          # built: holds its config, has touched nothing
    topology = strategy.setup()                # set up: checks and initializes this process
    strategy.prepare(strategies.Plan(model_dir="runs/m1", steps_per_worker=1000, per_replica_batch=1024))
    estimator = tf.estimator.Estimator(strategy.wrap_model_fn(model_fn), config=strategy.run.run_config)

`setup()` checks what only the running process can check (`validate`),
initializes it (environment, collective libraries) and returns its
`Topology`; called again it returns the same one. `prepare(plan)` takes the
run's plan (the steps, the checkpoint interval, the resume step) and agrees
on it with the processes that must agree (Horovod ranks: one collective, in
`prepare` only), building the `RunSettings` that `strategy.run` reads;
called again with the same plan it does nothing, with another it raises.
Every other member is a pure read or does one thing.

A member called before the step it needs raises `LifecycleError` naming that
step (`STAGE_OF` lists them): nothing happens lazily behind the caller's
back. `Strategy` guards its own members and every adapter's overrides of
them (`guard_members`, applied to each subclass as it is defined).
"""

import dataclasses
import functools
from typing import Dict, Optional

# The stages, in order.
BUILT, SET_UP, PREPARED = 0, 1, 2
# What to call to reach a stage, for the error.
STEP_TO_REACH = {SET_UP: "strategy.setup()",
                 PREPARED: "strategy.prepare(strategies.Plan(...)) (after setup())"}
STAGE_NAMES = {SET_UP: "the process set up", PREPARED: "the plan"}
# The members of `Strategy` that need a stage, and the stage each needs (the `_` ones: what its public members and
# adapters call).
STAGE_OF: Dict[str, int] = dict(
    {member: SET_UP for member in (
        "topology", "serve", "input_plan", "model_context", "agree_max", "describe", "prepare",
        "_session_config", "_train_hooks", "_learning_rate_factor", "_optimizer_wrappers", "_embedding_factory",
        "_gradient_share", "_replicate", "_agree_max_op")},
    **{member: PREPARED for member in ("run", "wrap_model_fn", "finish_training")})
# The Estimator's default number of checkpoints kept.
DEFAULT_KEEP_CHECKPOINT_MAX = 5
DEFAULT_SAVE_CHECKPOINTS_STEPS = 1000
DEFAULT_LOG_EVERY_N_STEPS = 100
# The attribute a guarded function carries: the stage it needs.
_GUARD_ATTRIBUTE = "__lifecycle_stage__"


class LifecycleError(RuntimeError):
    """A strategy's member was called before the step it needs (`setup()` or `prepare(plan)`)."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a strategy is prepared from: the training run this process takes part in.

    Attributes:
      model_dir: the job's checkpoint directory (the chief's; a strategy may
        give other processes private ones: `RunSettings.checkpoint_dir`).
      steps_per_worker: the steps each training process runs; None: until
        its input ends (Pipe mode without row counts).
      per_replica_batch: examples per replica and step; a large-batch rule
        needs it.
      save_checkpoints_steps: the checkpoint interval in global steps.
      keep_checkpoint_max: checkpoints kept.
      log_every_n_steps: the interval of summaries and the step counter.
      seed: the graph-level random seed; None: none.
      resume_step: the global step of the checkpoint this process found in
        `model_dir`; None: a new model directory. Only the chief's counts:
        `prepare` agrees on it (`RunSettings.start_step`).
      max_steps: the global step training stops at where the run's input
        position moved it (a resumed or resized run counts its budget in
        examples: `deepfm.runtime.input_position`; at `resume_step` it
        trains no step); None: `InputPlan.global_max_steps(steps_per_worker)`.
    """

    model_dir: str
    steps_per_worker: Optional[int] = None
    per_replica_batch: Optional[int] = None
    save_checkpoints_steps: int = DEFAULT_SAVE_CHECKPOINTS_STEPS
    keep_checkpoint_max: int = DEFAULT_KEEP_CHECKPOINT_MAX
    log_every_n_steps: int = DEFAULT_LOG_EVERY_N_STEPS
    seed: Optional[int] = None
    resume_step: Optional[int] = None
    max_steps: Optional[int] = None

    def __post_init__(self):
        if not self.model_dir:
            raise ValueError("a Plan needs the model directory, got %r" % (self.model_dir,))
        for name in ("steps_per_worker", "per_replica_batch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError("Plan.%s must be >= 1 or None, got %r" % (name, value))
        for name in ("save_checkpoints_steps", "keep_checkpoint_max", "log_every_n_steps"):
            if getattr(self, name) < 1:
                raise ValueError("Plan.%s must be >= 1, got %r" % (name, getattr(self, name)))
        for name in ("resume_step", "max_steps"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError("Plan.%s must be >= 0 or None, got %r" % (name, value))


def require(strategy, member: str, stage: int) -> None:
    """Raises `LifecycleError` unless `strategy` reached `stage`, naming `member` and the step to call.

    Args:
      strategy: a `Strategy` (its `_stage` attribute, which only this
        module reads, says where it is).
      member: what was called, for the message.
      stage: `SET_UP` or `PREPARED`.
    """
    if strategy._stage < stage:
        raise LifecycleError("strategy %r: %s needs %s; call %s first" % (
            strategy.name, member, STAGE_NAMES[stage], STEP_TO_REACH[stage]))


def _guarded(label: str, function, stage: int):
    """`function` (a method or a property's getter) checking `stage` first; `label` names it in the error."""
    @functools.wraps(function)
    def checked(self, *args, **kwargs):
        require(self, label, stage)
        return function(self, *args, **kwargs)
    setattr(checked, _GUARD_ATTRIBUTE, stage)
    return checked


def guard_members(cls) -> None:
    """Wraps each member `cls` itself defines that `STAGE_OF` names in the check of its stage."""
    for member, stage in STAGE_OF.items():
        value = cls.__dict__.get(member)
        if isinstance(value, property):
            if value.fget is not None and not hasattr(value.fget, _GUARD_ATTRIBUTE):
                guarded = _guarded(member, value.fget, stage)
                setattr(cls, member, property(guarded, value.fset, value.fdel, value.__doc__))
        elif callable(value) and not hasattr(value, _GUARD_ATTRIBUTE):
            setattr(cls, member, _guarded(member + "()", value, stage))
