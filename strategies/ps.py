"""The `ps` strategy: between-graph replication with parameter servers.

Every task runs its own copy of this process, told apart by `TF_CONFIG`
(see `strategies.cluster`): the chief (or SageMaker's `master`) and the
workers train, the `ps` tasks hold the variables.

* Placement: every variable goes to a parameter server, each to the one
  holding the fewest bytes so far; the two embedding tables are split into
  one partition per ps (`fixed_size_partitioner`), so each ps holds a
  near-equal share and writes one near-equal checkpoint shard. All other ops
  run on the worker itself.
* Updates are asynchronous: each worker applies its gradients on its own, so
  the learning rate is multiplied by `--ps_lr_factor` (< 1 lowers it), and
  the global step advances once per step of every worker (training stops at
  the sum of all workers' steps).
* A worker's session talks only to the parameter servers and itself
  (`device_filters`); the chief saves checkpoints to the shared `model_dir`,
  then evaluates and exports.
* Each worker reads its own shard of the input: one worker per host, so the
  files are sharded by host unless S3 already did it (`--s3_sharded`).
* With `--ps_towers N`, each worker trains N towers (the `tower` adapter,
  used as is) and sends their averaged gradients to the parameter servers.
* The other workers start training as soon as the chief has initialized
  the variables (a token in a queue on ps 0), not after TensorFlow's
  30-second readiness poll.
* A parameter server serves until every worker has finished training and
  exited, then returns: each worker, as its training ends, puts a token in a
  queue on every ps; each ps waits for one token per worker, then for every
  training task's process to exit (the chief still evaluates and exports,
  and a worker's session may still be closing). The queues and the hooks
  that use them: `strategies.ps_coordination`.
"""

import dataclasses
import time
from typing import Dict, List, Optional

import tensorflow as tf
from absl import logging

from input_pipeline import sharding
from strategies import cluster as cluster_lib
from strategies import context as context_lib
from strategies import input_plan as input_plan_lib
from strategies import lifecycle, memory_estimate, registry, server_ports, strategy, tower
from strategies import options as options_lib
from strategies import ps_coordination as coordination
from strategies import strategy_names as names
from strategies import tables as tables_lib
from strategies import topology as topology_lib
from strategies.config import StrategyConfig

# Variable-holding op types placed on the parameter servers.
PS_OPS = frozenset((
    "Variable", "VariableV2", "AutoReloadVariable", "VarHandleOp",
    "MutableHashTable", "MutableHashTableV2", "MutableHashTableOfTensors",
    "MutableHashTableOfTensorsV2", "MutableDenseHashTable", "MutableDenseHashTableV2"))
# Where SageMaker stops a host's ps with its training script (`finish_training`):
# each other worker reports that its training session has closed (in
# `ps_coordination.workers_closed_queue`), and
# then waits, at most CHIEF_EXIT_TIMEOUT_SECONDS, for the chief's process to
# exit (its gRPC port closes), looking every CHIEF_EXIT_POLL_SECONDS; the
# chief waits at most WORKERS_CLOSED_TIMEOUT_SECONDS for the reports.
CHIEF_EXIT_TIMEOUT_SECONDS = 1800.0
CHIEF_EXIT_POLL_SECONDS = 1.0
WORKERS_CLOSED_TIMEOUT_SECONDS = 600.0
# After the last worker's token a parameter server waits for every training
# task's process to exit (its gRPC port closes), at most
# TRAINING_EXIT_TIMEOUT_SECONDS, looking every TRAINING_EXIT_POLL_SECONDS: a
# worker reports before its training session closes, and a session closing
# while its ps goes away can block for ever.
TRAINING_EXIT_TIMEOUT_SECONDS = 1800.0
TRAINING_EXIT_POLL_SECONDS = 0.2
# Bounds on a training task's waits for its parameter servers: no operation
# of its sessions (a step, a checkpoint save) may take longer than this
# (`ConfigProto.operation_timeout_in_ms`), and waiting for a session to be
# ready gives up after SESSION_CREATION_TIMEOUT_SECONDS
# (`RunConfig.session_creation_timeout_secs`; TensorFlow's default is 2 h).
# They do not end the wait TensorFlow starts when a ps dies (it re-creates
# the session and waits for the ps to return): `deepfm.runtime.watchdog` does.
OPERATION_TIMEOUT_SECONDS = 120
SESSION_CREATION_TIMEOUT_SECONDS = 120
MILLISECONDS = 1000


@dataclasses.dataclass(frozen=True)
class PSOptions:
    """Options of the `ps` strategy.

    Attributes:
      ps_lr_factor: factor on the learning rate for asynchronous updates
        (< 1 lowers it).
      ps_towers: towers per worker (the `tower` strategy inside each
        worker); 0 for none.
    """

    ps_lr_factor: float = options_lib.option(1.0, "Parameter server: learning-rate factor for asynchronous updates.")
    ps_towers: int = options_lib.option(0, "Parameter server: towers per worker (0: none).")

    def __post_init__(self):
        if not self.ps_lr_factor > 0:
            raise ValueError("--ps_lr_factor must be > 0, got %r" % self.ps_lr_factor)
        options_lib.check_at_least("ps_towers", self.ps_towers, 0)


@registry.register(names.PS)
class ParameterServerStrategy(strategy.Strategy):
    """One task of a parameter-server job described by `TF_CONFIG`.

    `TF_CONFIG` is read from the environment when the adapter is built, as
    Estimator's `RunConfig` reads it; `validate` reports a missing or bad
    one and a cluster without ps tasks. A training task's gRPC server starts
    as its first training session begins (`ps_coordination.StartServerHook`, the first of
    `RunSettings.train_hooks`); a parameter server starts its own in `serve`.
    """

    Options = PSOptions
    _options: PSOptions
    _memory_scale = "with %d parameter server(s)"

    def __init__(self, config: StrategyConfig):
        super().__init__(config)
        self._cluster: Optional[cluster_lib.ClusterInfo] = None
        self._cluster_error: Optional[ValueError] = None
        try:
            self._cluster = cluster_lib.from_environment()
        except ValueError as e:
            self._cluster_error = e
        # What one task does on its own devices: towers on a training task
        # with --ps_towers, else one device (a parameter server computes nothing).
        self._towers = self._options.ps_towers > 0 and self._cluster is not None and not self._cluster.is_ps
        self._local = registry.get(
            dataclasses.replace(config, name=names.TOWER, options=tower.TowerOptions(self._options.ps_towers))
            if self._towers else dataclasses.replace(config, name=names.SINGLE, options=None))
        self._server: Optional[tf.distribute.Server] = None

    @property
    def cluster(self) -> cluster_lib.ClusterInfo:
        """The cluster and this task.

        Raises:
          ValueError: `TF_CONFIG` is missing or invalid.
        """
        if self._cluster is None:
            raise ValueError("--strategy ps: %s" % self._cluster_error)
        return self._cluster

    # --- the lifecycle -----------------------------------------------------------------------------
    def _validate(self) -> None:
        """Also checks the cluster: a valid `TF_CONFIG` with at least one ps task."""
        super()._validate()
        cluster = self.cluster
        if cluster.num_ps < 1:
            raise ValueError("--strategy ps needs at least one ps task in TF_CONFIG's cluster, got jobs %s"
                             % sorted(cluster.jobs))

    def _set_up(self) -> topology_lib.Topology:
        """Sets up the task's own devices (one, or the towers); its place comes from `TF_CONFIG`."""
        local = self._local.setup()
        cluster = self.cluster
        if cluster.is_ps:
            return topology_lib.Topology(role=topology_lib.ROLE_PS, task=cluster.task_name,
                                         job_name=cluster.task_type, is_chief=False, evaluates=False,
                                         workers=cluster.num_workers)
        peers = {"%s_%d" % (cluster_lib.PS, index): address
                 for index, address in enumerate(cluster.jobs.get(cluster_lib.PS, ()))}
        # One worker per host: the files are sharded by host.
        return topology_lib.Topology(
            task=cluster.task_name, job_name=cluster.task_type, is_chief=cluster.is_chief,
            evaluates=cluster.is_chief, evaluates_in_training_session=True, replicas_in_sync=local.replicas_in_sync,
            workers=cluster.num_workers, rank=cluster.worker_index, peers=peers)

    def serve(self, exit_timeout_seconds: float = TRAINING_EXIT_TIMEOUT_SECONDS) -> None:
        """Serves this parameter server's variables until every worker is done.

        Blocks until each of the job's `num_workers` training tasks has put
        its token in this server's done queue and every training task's
        process has exited, then returns. A worker puts its token in before
        its training session closes, and the chief evaluates and exports
        after training, so the server stays while any of them may still need
        it.

        Args:
          exit_timeout_seconds: the longest wait for the training processes to
            exit after the last token (0: look once); a process still up then
            is named in a warning.
        """
        cluster = self.cluster
        server = self._start_server()
        logging.info("parameter server %d of %d serving at %s until %d worker(s) finish",
                     cluster.task_index, cluster.num_ps, cluster.task_address, cluster.num_workers)
        with tf.Graph().as_default():
            dequeue = coordination.done_queue(cluster.task_index, cluster.num_workers).dequeue()
            with tf.compat.v1.Session(server.target, config=self._session_config()) as session:
                for done in range(1, cluster.num_workers + 1):
                    worker = session.run(dequeue)
                    logging.info("parameter server %d: worker %d finished training (%d of %d)",
                                 cluster.task_index, worker, done, cluster.num_workers)
        start = time.monotonic()
        still_up = server_ports.wait_until_all_closed(cluster.training_tasks, exit_timeout_seconds,
                                                      TRAINING_EXIT_POLL_SECONDS)
        if still_up:
            logging.warning("parameter server %d: %s still up %.0f s after the end of training; exiting anyway",
                            cluster.task_index, ", ".join(still_up), exit_timeout_seconds)
        else:
            logging.info("parameter server %d: every worker finished and exited (waited %.1f s); exiting",
                         cluster.task_index, time.monotonic() - start)

    def _start_server(self) -> tf.distribute.Server:
        """This task's server, listening at its `TF_CONFIG` port on every address of the machine.

        Raises:
          RuntimeError: another program holds that port (TensorFlow says only
            "Could not start gRPC server"); the message names the port.
        """
        cluster = self.cluster
        try:
            return tf.distribute.Server(cluster.cluster_spec(), job_name=cluster.task_type,
                                        task_index=cluster.task_index, config=self._session_config(), start=True)
        except tf.errors.UnknownError as e:
            port = int(cluster.task_address.rsplit(":", 1)[1])
            if not server_ports.port_taken(port):
                raise
            raise RuntimeError("%s cannot listen at %s: port %d is taken on this machine by another program; start "
                               "the job again on free ports (deepfm.launch draws new ones at every start)"
                               % (cluster.task_name, cluster.task_address, port)) from e

    def _training_server(self) -> tf.distribute.Server:
        """This training task's server, started on the first call (`ps_coordination.StartServerHook`)."""
        if self._server is None:
            self._server = self._start_server()
        return self._server

    # --- the input ---------------------------------------------------------------------------------
    def input_plan(self) -> input_plan_lib.InputPlan:
        """This worker's shard of the input, its own devices' batch, and every worker's steps adding up.

        One worker per host: the files are sharded by host unless S3 already
        split them (`sharding.file_mode_shard`); for one worker per host the
        Pipe-mode rule gives the same shard, and the worker reads the first
        training channel. Every worker advances the shared global step: the
        global step training stops at is the sum of their steps.
        """
        num_pipelines, pipeline_id = sharding.file_mode_shard(self.topology.placement(), self.config.s3_sharded)
        channels = self.config.train_channels
        return dataclasses.replace(
            super().input_plan(),
            context=tf.distribute.InputContext(num_input_pipelines=num_pipelines, input_pipeline_id=pipeline_id,
                                               num_replicas_in_sync=self.topology.replicas_in_sync),
            replicas_per_batch=self._local.input_plan().replicas_per_batch,
            channel=sharding.assign_channel(channels, local_rank=0, workers_per_host=1) if channels else None,
            global_steps_per_step=self.cluster.num_workers)

    # --- the graph --------------------------------------------------------
    def _session_config(self) -> tf.compat.v1.ConfigProto:
        """The local (or tower) configuration, talking only to the ps tasks and this task.

        A training task's operations time out after
        `OPERATION_TIMEOUT_SECONDS`; a parameter server's wait for the
        workers has no limit.
        """
        config = self._local._session_config()
        del config.device_filters[:]
        if self.cluster.is_ps:
            config.device_filters.append(self.cluster.task_device)
        else:
            config.device_filters.extend(["/job:%s" % cluster_lib.PS, self.cluster.task_device])
            config.operation_timeout_in_ms = OPERATION_TIMEOUT_SECONDS * MILLISECONDS
        return config

    def _run_config_kwargs(self, plan: lifecycle.Plan, checkpoint_dir: str) -> dict:
        """With this adapter's placement (`RunConfig` reads the cluster from `TF_CONFIG`).

        A training task waits at most `SESSION_CREATION_TIMEOUT_SECONDS` for
        its session to be ready.
        """
        return dict(super()._run_config_kwargs(plan, checkpoint_dir), device_fn=VariablePlacer(self.cluster),
                    session_creation_timeout_secs=SESSION_CREATION_TIMEOUT_SECONDS)

    def _learning_rate_factor(self) -> float:
        return self._options.ps_lr_factor

    def _embedding_factory(self, mode: str) -> tables_lib.EmbeddingFactory:
        """Tables split into one partition per ps (`fixed_size_partitioner`), near-equal shares."""
        del mode
        return tables_lib.variable_tables(
            partitioner=tf.compat.v1.fixed_size_partitioner(num_shards=self.cluster.num_ps),
            dedup=self.config.dedup_lookups)

    def _replicate(self, model_fn: context_lib.ModelFn) -> context_lib.ModelFn:
        """One model_fn call, or one per tower with `--ps_towers`."""
        return self._local._replicate(model_fn)

    def _train_hooks(self) -> List[tf.estimator.SessionRunHook]:
        """The start of this task's server, the tower hooks, the chief-ready barrier and the end-of-training
        report; on the other workers also the stop once the chief finished training (it may stop early)."""
        hooks = [coordination.StartServerHook(self._training_server)] + self._local._train_hooks()
        target = "grpc://" + self.cluster.task_address
        hooks = hooks + [coordination.ChiefReadyHook(self.cluster, target, self._session_config()),
                         coordination.TrainingDoneHook(self.cluster)]
        if self.cluster.is_chief:
            return hooks
        return hooks + [coordination.StopWhenChiefDoneHook(self.cluster)]

    def finish_training(self) -> None:
        """Where each ps stops with its host's training task: nobody leaves while another needs its ps.

        SageMaker's toolkit runs a parameter server on every host and stops
        it as soon as that host's training script exits (its check that the
        master is up, `curl master:2222`, fails against a gRPC port at once).
        A session open or closing while one of its ps goes away can block for
        ever, and the chief's evaluation and export still need every ps. So,
        once its training session has closed, each other worker reports so in
        a queue on ps 0 and waits for the chief's process to exit (its gRPC
        port closes; no session stays open meanwhile); the chief waits for
        every report before it goes on. With this library's own ps tasks
        (`serve`), which stop only after every worker, nothing waits.
        """
        cluster = self.cluster
        if not cluster.ps_stop_with_their_hosts or cluster.num_workers < 2:
            return
        server = self._training_server()
        config = self._session_config()
        del config.device_filters[:]
        config.device_filters.extend(["/job:%s/task:0" % cluster_lib.PS, cluster.task_device])
        with tf.Graph().as_default():
            queue = coordination.workers_closed_queue(cluster.num_workers)
            op = (queue.dequeue_many(cluster.num_workers - 1) if cluster.is_chief
                  else queue.enqueue(cluster.worker_index))
            start = time.monotonic()
            with tf.compat.v1.Session(server.target, config=config) as session:
                try:
                    session.run(op, options=tf.compat.v1.RunOptions(
                        timeout_in_ms=int(WORKERS_CLOSED_TIMEOUT_SECONDS * MILLISECONDS)))
                except tf.errors.DeadlineExceededError:
                    logging.warning("%s: not every worker reported the end of training within %.0f s",
                                    cluster.task_name, WORKERS_CLOSED_TIMEOUT_SECONDS)
        if cluster.is_chief:
            logging.info("%s: every worker closed its training session (waited %.1f s)", cluster.task_name,
                         time.monotonic() - start)
            return
        start = time.monotonic()
        still_up = server_ports.wait_until_all_closed({cluster.chief_job: cluster.jobs[cluster.chief_job][0]},
                                                      CHIEF_EXIT_TIMEOUT_SECONDS, CHIEF_EXIT_POLL_SECONDS)
        logging.info("%s: the chief's process %s (waited %.1f s); this host's ps may stop",
                     cluster.task_name, "is still up" if still_up else "exited", time.monotonic() - start)

    def _memory_estimates(self, state: memory_estimate.ModelState, ids_per_step: int,
                         scale: Optional[int] = None) -> Dict[str, memory_estimate.ProcessMemory]:
        """A parameter server holds its partition of each table and its share of the dense variables, with their
        slots; a training task none of the tables and a copy of the dense variables, and the rows it pulls and the
        gradients it pushes each step. `scale`: parameter servers (default: `TF_CONFIG`'s)."""
        servers = scale if scale is not None else self.cluster.num_ps
        table_bytes, table_slot_bytes = state.tables_held(servers)
        dense_share = state.dense_share(servers)
        return {
            topology_lib.ROLE_PS: memory_estimate.ProcessMemory(
                variables=table_bytes + round(dense_share * state.dense_bytes),
                slots=table_slot_bytes + round(dense_share * state.dense_slot_bytes)),
            topology_lib.ROLE_WORKER: memory_estimate.ProcessMemory(
                variables=state.dense_bytes, buffers=state.exchange_bytes(ids_per_step)),
        }

    def describe(self) -> str:
        cluster = self.cluster
        towers = ", %d tower(s) per worker" % self.topology.replicas_in_sync if self._towers else ""
        return "ps: %d parameter server(s), %d worker(s) updating asynchronously%s, learning rate x%g; this is %s" % (
            cluster.num_ps, cluster.num_workers, towers, self._options.ps_lr_factor, cluster.task_name)


class VariablePlacer:
    """Estimator `device_fn`: variables to the ps tasks, everything else to this task.

    Each variable goes to the parameter server holding the fewest bytes so
    far (optimizer slots follow their variable by colocation); other ops keep
    their device type and index (a tower's `/cpu:N`) on this task. An op
    with an explicit job keeps it; one on a ps task runs on that task's
    default device.

    Args:
      cluster: the cluster and this task.
    """

    def __init__(self, cluster: cluster_lib.ClusterInfo):
        self._cluster = cluster
        self._task = tf.DeviceSpec.from_string(cluster.task_device)
        self._graph = None
        self._bytes: List[int] = []

    def __deepcopy__(self, memo):
        # Estimator deep-copies its RunConfig; like a plain function, the
        # device function is shared, not copied.
        return self

    def __call__(self, op) -> str:
        current = tf.DeviceSpec.from_string(op.device or "")
        if current.job == cluster_lib.PS:
            # On its ps task's own device: a tower's `/cpu:N` merged into a
            # variable read must not split one ps's checkpoint shard in two.
            return current.replace(device_type=None, device_index=None).to_string()
        if current.job or op.type not in PS_OPS:
            return self._task.make_merged_spec(current).to_string()
        if op.graph is not self._graph:
            self._graph = op.graph
            self._bytes = [0] * self._cluster.num_ps
        ps = min(range(len(self._bytes)), key=self._bytes.__getitem__)
        self._bytes[ps] += _variable_bytes(op)
        return self._cluster.ps_device(ps)


def _variable_bytes(op) -> int:
    """Bytes of the variable an op creates (at least 1, so that ties still rotate)."""
    try:
        shape = tf.TensorShape(op.get_attr("shape"))
        dtype = tf.as_dtype(op.get_attr("dtype"))
    except ValueError:
        return 1
    elements = shape.num_elements() if shape.is_fully_defined() else 1
    return max(1, elements * dtype.size)
