"""The `mirrored` strategy: `tf.distribute.MirroredStrategy` under tf.estimator.

Synchronous training over the replicas of one host, through
`RunConfig(train_distribute=..., eval_distribute=...)`. The Estimator calls
the model_fn once per replica and gives each replica its own batch of the
dataset, so a dataset batch is one replica's batch and one global step
consumes `replicas` dataset batches (global batch = per-replica batch x
replicas). The V1 optimizers divide each replica's loss by the replica count
under the Estimator, so the summed gradients are the mean.

On CPU the replicas are the virtual devices `/cpu:1` .. `/cpu:N`, leaving
out `/cpu:0`, which does the reduction (see `strategies.devices`); on GPUs,
`/gpu:0` .. `/gpu:N-1`. `--cross_device_ops` picks the reduction:

* `reduction_to_one_device`: `tf.distribute.ReductionToOneDevice` onto
  `/cpu:0`;
* `hierarchical_copy`: `tf.distribute.HierarchicalCopyAllReduce`;
* `nccl`: `tf.distribute.NcclAllReduce` (GPUs only).
"""

import dataclasses
from typing import Callable, Dict, Optional

import tensorflow as tf

from strategies import context as context_lib
from strategies import devices as devices_lib
from strategies import input_plan as input_plan_lib
from strategies import lifecycle, memory_estimate, registry
from strategies import options as options_lib
from strategies import strategy_names as names
from strategies import topology as topology_lib

REDUCTION_TO_ONE_DEVICE = "reduction_to_one_device"
HIERARCHICAL_COPY = "hierarchical_copy"
NCCL = "nccl"
CROSS_DEVICE_OPS = (REDUCTION_TO_ONE_DEVICE, HIERARCHICAL_COPY, NCCL)
GPU_ONLY_CROSS_DEVICE_OPS = (NCCL,)


def make_cross_device_ops(name: str) -> tf.distribute.CrossDeviceOps:
    """The `tf.distribute.CrossDeviceOps` named by `--cross_device_ops`.

    Raises:
      ValueError: an unknown name; the message lists the valid ones.
    """
    factories: Dict[str, Callable[[], tf.distribute.CrossDeviceOps]] = {
        REDUCTION_TO_ONE_DEVICE: lambda: tf.distribute.ReductionToOneDevice(
            reduce_to_device=devices_lib.HOST_DEVICE),
        HIERARCHICAL_COPY: tf.distribute.HierarchicalCopyAllReduce,
        NCCL: tf.distribute.NcclAllReduce,
    }
    options_lib.check_choice("cross_device_ops", name, CROSS_DEVICE_OPS)
    return factories[name]()


def check_cross_device_ops(name: str, device_list: devices_lib.DeviceList) -> None:
    """Checks that the reduction `name` can run on `device_list`.

    Raises:
      ValueError: a GPU-only reduction (NCCL) on CPU replicas.
    """
    if name in GPU_ONLY_CROSS_DEVICE_OPS and device_list.device_type != devices_lib.GPU:
        raise ValueError(
            "--cross_device_ops %s needs GPU replicas, but the mirrored replicas are on CPU (%s); "
            "use --cross_device_ops %s or %s on CPU" % (
                name, ",".join(device_list.devices), REDUCTION_TO_ONE_DEVICE, HIERARCHICAL_COPY))


@dataclasses.dataclass(frozen=True)
class MirroredOptions(devices_lib.ReplicaOptions):
    """Options of the `mirrored` strategy.

    Attributes:
      cross_device_ops: the reduction (`CROSS_DEVICE_OPS`; NCCL needs GPUs).
    """

    cross_device_ops: str = options_lib.option(REDUCTION_TO_ONE_DEVICE, "MirroredStrategy's reduction.",
                                        choices=CROSS_DEVICE_OPS)

    def __post_init__(self):
        super().__post_init__()
        options_lib.check_choice("cross_device_ops", self.cross_device_ops, CROSS_DEVICE_OPS)


@registry.register(names.MIRRORED)
class MirroredStrategy(devices_lib.LocalReplicaStrategy):
    """One process, one `tf.distribute.MirroredStrategy` replica per device.

    Reads `num_devices` and `cross_device_ops` from its `MirroredOptions`
    and `device_type` from the `StrategyConfig`.
    """

    Options = MirroredOptions
    _options: MirroredOptions

    def _validate(self) -> None:
        """Also checks the reduction against the devices.

        Raises:
          ValueError: a bad option, GPUs asked for that are not visible, or
            NCCL on CPU replicas.
        """
        super()._validate()
        check_cross_device_ops(self._options.cross_device_ops, self.device_list)

    def _memory_estimates(self, state: memory_estimate.ModelState, ids_per_step: int,
                         scale: Optional[int] = None) -> Dict[str, memory_estimate.ProcessMemory]:
        """A copy of every variable and slot per replica on CPU replicas, all in host memory; on GPUs the copies
        are in the GPUs' memory, which this estimate of host memory leaves out."""
        del ids_per_step, scale
        copies = len(self.device_list) if self.device_list.device_type == devices_lib.CPU else 0
        return {topology_lib.ROLE_WORKER: memory_estimate.ProcessMemory(
            variables=copies * state.variable_bytes, slots=copies * state.slot_bytes)}

    def input_plan(self) -> input_plan_lib.InputPlan:
        """Dataset batches one global step consumes: one per replica."""
        return dataclasses.replace(super().input_plan(), batches_per_step=len(self.device_list))

    def _gradient_share(self) -> float:
        """1: the V1 optimizers divide each replica's loss by the replicas already, and sum the gradients."""
        return 1.0

    def distribution(self) -> tf.distribute.MirroredStrategy:
        """A new `tf.distribute.MirroredStrategy` over the replica devices.

        Raises:
          ValueError: NCCL on CPU replicas, or an unknown reduction.
        """
        check_cross_device_ops(self._options.cross_device_ops, self.device_list)
        # Built in graph mode, as the Estimator uses it. Built eagerly, it
        # would create a variable on each replica device in the eager
        # context, which has no virtual CPU devices: those exist only in the
        # Estimator's sessions (`device_count`).
        with tf.Graph().as_default():
            return tf.distribute.MirroredStrategy(
                devices=list(self.device_list.devices),
                cross_device_ops=make_cross_device_ops(self._options.cross_device_ops))

    def _run_config_kwargs(self, plan: lifecycle.Plan, checkpoint_dir: str) -> dict:
        """Training and evaluating through the MirroredStrategy."""
        distribution = self.distribution()
        return dict(super()._run_config_kwargs(plan, checkpoint_dir), train_distribute=distribution,
                    eval_distribute=distribution)

    def _replicate(self, model_fn: context_lib.ModelFn) -> context_lib.ModelFn:
        """`model_fn` itself: the Estimator calls it once per replica."""
        return model_fn

    def describe(self) -> str:
        return "mirrored: %d replica(s) on %s, %s" % (
            len(self.device_list), ",".join(self.device_list.devices), self._options.cross_device_ops)
