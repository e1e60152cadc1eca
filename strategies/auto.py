"""The `auto` strategy: picks a strategy from the hardware and the launch.

`auto` is a choice, not an adapter: the registry resolves it to the adapter
`choose` picks before anything is built (`strategies.registry.resolve`), so
`strategies.get` returns that adapter itself. The order follows the
best-practice text: use one device well first, scale up on one host before
scaling out, and on several hosts use what the job was launched for.

* Launched by horovodrun/mpirun (Horovod's rank variables set): `horovod`.
* A `TF_CONFIG` naming parameter servers: `ps`.
* Several GPUs: `mirrored` (NCCL all-reduce on GPUs).
* One GPU: `single`.
* At least `MIN_CORES_FOR_TOWERS` CPU cores: `tower` (one tower per core
  but `/cpu:0`, which reduces; the text finds towers faster than
  MirroredStrategy on CPU).
* Otherwise `single`.

Launched as one of several Horovod ranks on a host, with the threads left
to TensorFlow, each rank gets its share of the host's vCPUs as intra- and
inter-op threads (`strategies.host_cores.threads_for_rank`): otherwise
every rank's thread pools would take all of them.
"""

import dataclasses
import json
import os
from typing import Mapping, Tuple

import tensorflow as tf
from absl import logging

from strategies import horovod_controllers, host_cores, registry
from strategies import strategy_names as names
from strategies.config import StrategyConfig

# Towers need one core for the reduction and at least two more to beat one device.
MIN_CORES_FOR_TOWERS = 3
HOROVOD_SIZE_VARIABLES = ("HOROVOD_SIZE",) + horovod_controllers.MPI_SIZE_VARIABLES


def choose(environ: Mapping[str, str], cpu_count: int, num_gpus: int) -> Tuple[str, str]:
    """Returns the strategy name to use and the reason, for the log.

    Args:
      environ: the process environment.
      cpu_count: CPU cores of this host.
      num_gpus: GPUs visible to this process.
    """
    for variable in HOROVOD_SIZE_VARIABLES:
        if int(environ.get(variable, "1") or 1) > 1:
            return names.HOROVOD, "%s=%s: launched as Horovod ranks" % (variable, environ[variable])
    tf_config = environ.get("TF_CONFIG")
    if tf_config:
        try:
            cluster = json.loads(tf_config).get("cluster", {})
        except json.JSONDecodeError as e:
            raise ValueError("TF_CONFIG is not valid JSON (%s): %r" % (e, tf_config)) from e
        if cluster.get("ps"):
            return names.PS, "TF_CONFIG names %d parameter server(s)" % len(cluster["ps"])
    if num_gpus > 1:
        return names.MIRRORED, "%d GPUs on one host: scale up before scaling out" % num_gpus
    if num_gpus == 1:
        return names.SINGLE, "one GPU"
    if cpu_count >= MIN_CORES_FOR_TOWERS:
        return names.TOWER, "%d CPU cores on one host: one tower per core but /cpu:0" % cpu_count
    return names.SINGLE, "%d CPU core(s): too few for towers to pay off" % cpu_count


def with_rank_threads(config: StrategyConfig, environ: Mapping[str, str], vcpus: int) -> StrategyConfig:
    """`config` with each of its host's Horovod ranks given its share of `vcpus` as threads, where it sets none.

    Unchanged for a strategy that is not Horovod ranks, a config that sets
    either thread count, or one rank per host.
    """
    if config.name not in names.HOROVOD_RANKS or config.intra_op_threads or config.inter_op_threads:
        return config
    found = host_cores.threads_for_rank(environ, vcpus)
    if found is None:
        return config
    threads, reason = found
    logging.info("--strategy auto: %s", reason)
    return dataclasses.replace(config, intra_op_threads=threads, inter_op_threads=threads)


def _rank_threads(config: StrategyConfig) -> StrategyConfig:
    """`with_rank_threads` for this process: its environment and the vCPUs it may use."""
    return with_rank_threads(config, os.environ, len(os.sched_getaffinity(0)))


@registry.register_choice(names.AUTO, adjust=_rank_threads)
def pick() -> Tuple[str, str]:
    """`choose` for this process: its environment, CPU cores and visible GPUs."""
    return choose(os.environ, os.cpu_count() or 1, len(tf.config.list_physical_devices("GPU")))
