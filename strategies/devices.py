"""The local devices that the tower and mirrored strategies replicate over.

On CPU, TensorFlow shows one device, `/cpu:0`, unless the session is told
to create more: `ConfigProto(device_count={'CPU': N + 1})` makes `/cpu:0` ..
`/cpu:N`, all sharing the host's cores. The replicas run on `/cpu:1` ..
`/cpu:N`; `/cpu:0` holds the variables and does the reduction. On GPUs the
replicas are `/gpu:0` .. `/gpu:N-1`.

`LocalReplicaStrategy` is the common base of the strategies that replicate
over these devices.
"""

import dataclasses
import os
from typing import ClassVar, Optional, Tuple

import tensorflow as tf

from strategies import options as options_lib
from strategies import strategy
from strategies import tables as tables_lib
from strategies import topology as topology_lib
from strategies.config import StrategyConfig

CPU = "cpu"
GPU = "gpu"
AUTO = "auto"
# The CPU device that holds shared variables and reduces gradients.
HOST_DEVICE = "/cpu:0"
# Replica devices on CPU start after HOST_DEVICE.
FIRST_CPU_REPLICA = 1
MIN_DEVICES = 1


@dataclasses.dataclass(frozen=True)
class DeviceList:
    """The devices of one host's replicas.

    Attributes:
      device_type: `cpu` or `gpu`.
      devices: the replica devices, e.g. ('/cpu:1', '/cpu:2') or
        ('/gpu:0', '/gpu:1').
    """

    device_type: str
    devices: Tuple[str, ...]

    def __len__(self) -> int:
        return len(self.devices)

    @property
    def parameter_device(self) -> str:
        """Where shared variables live: `/cpu:0`, or the GPU when there is one."""
        if self.device_type == GPU and len(self.devices) == 1:
            return self.devices[0]
        return HOST_DEVICE

    @property
    def cpu_device_count(self) -> int:
        """CPU devices the session must create (`device_count['CPU']`)."""
        if self.device_type == CPU:
            return len(self.devices) + FIRST_CPU_REPLICA
        return 1

    def session_config(self, config: tf.compat.v1.ConfigProto) -> tf.compat.v1.ConfigProto:
        """Returns a copy of `config` that creates these devices.

        Sets `device_count['CPU']` and `allow_soft_placement` (ops without a
        kernel on a replica's device, e.g. int64 ops on a GPU, fall back to
        the CPU).
        """
        updated = tf.compat.v1.ConfigProto()
        updated.CopyFrom(config)
        updated.allow_soft_placement = True
        updated.device_count["CPU"] = self.cpu_device_count
        return updated


def visible_gpus() -> int:
    """The number of GPUs TensorFlow can see (without initializing them)."""
    return len(tf.config.list_physical_devices("GPU"))


def host_cpus() -> int:
    """The CPU cores of this host (`os.cpu_count()`)."""
    return os.cpu_count() or MIN_DEVICES


def resolve(num_devices: int, device_type: str, gpus: Optional[int] = None,
            cpus: Optional[int] = None) -> DeviceList:
    """Picks the replica devices of this host.

    Args:
      num_devices: replicas wanted; 0 means every device: every GPU, or on
        CPU every core but the one `/cpu:0` runs on (at least one).
      device_type: `cpu`, `gpu`, or `auto` (GPUs when any is visible).
      gpus: visible GPUs; default: `visible_gpus()`.
      cpus: CPU cores; default: `host_cpus()`.

    Returns:
      The `DeviceList`.

    Raises:
      ValueError: a bad `num_devices` or `device_type`, `gpu` without a
        visible GPU, or more GPUs asked for than are visible.
    """
    if num_devices < 0:
        raise ValueError("--num_devices must be >= 0, got %r" % num_devices)
    if device_type not in (AUTO, CPU, GPU):
        raise ValueError("--device_type must be one of %s, got %r" % (", ".join((AUTO, CPU, GPU)), device_type))
    gpus = visible_gpus() if gpus is None else gpus
    cpus = host_cpus() if cpus is None else cpus
    if device_type == AUTO:
        device_type = GPU if gpus else CPU
    if device_type == GPU:
        if not gpus:
            raise ValueError("--device_type gpu: no GPU is visible to TensorFlow")
        count = num_devices or gpus
        if count > gpus:
            raise ValueError("--num_devices %d asks for more GPUs than the %d visible" % (count, gpus))
        return DeviceList(GPU, tuple("/gpu:%d" % i for i in range(count)))
    count = num_devices or max(MIN_DEVICES, cpus - FIRST_CPU_REPLICA)
    return DeviceList(CPU, tuple("/cpu:%d" % i for i in range(FIRST_CPU_REPLICA, FIRST_CPU_REPLICA + count)))


@dataclasses.dataclass(frozen=True)
class ReplicaOptions:
    """Options of a strategy with one replica per local device.

    Attributes:
      num_devices: replicas on this host; 0 means every device of the
        `device_type` (on CPU: every core but `/cpu:0`, which reduces).
    """

    num_devices: int = options_lib.option(0, "Towers or replicas on this host (tower, mirrored, ps towers); 0: every "
                                      "device (on CPU every core but /cpu:0).")

    def __post_init__(self):
        options_lib.check_at_least("num_devices", self.num_devices, 0)


class LocalReplicaStrategy(strategy.Strategy):
    """A strategy with one replica per local device (not registered itself).

    Reads `num_devices` from its options and `device_type` from the
    `StrategyConfig`; the session creates the virtual CPU devices.
    """

    Options: ClassVar[type] = ReplicaOptions
    _options: ReplicaOptions

    def __init__(self, config: StrategyConfig):
        super().__init__(config)
        self._device_list: Optional[DeviceList] = None

    def _validate(self) -> None:
        """Also resolves the devices.

        Raises:
          ValueError: a bad option, or GPUs asked for that are not visible.
        """
        super()._validate()
        self._device_list = resolve(self._options.num_devices, self.config.device_type)

    @property
    def device_list(self) -> DeviceList:
        """The replica devices (resolved on first use)."""
        if self._device_list is None:
            self._device_list = resolve(self._options.num_devices, self.config.device_type)
        return self._device_list

    def _set_up(self) -> topology_lib.Topology:
        """One process, one replica in sync per device."""
        return topology_lib.Topology(replicas_in_sync=len(self.device_list))

    def _session_config(self) -> tf.compat.v1.ConfigProto:
        """The base configuration, creating the virtual CPU devices."""
        return self.device_list.session_config(super()._session_config())

    def _embedding_factory(self, mode: str) -> tables_lib.EmbeddingFactory:
        """One variable per table, shared by the replicas."""
        del mode
        return strategy.plain_tables(self)
