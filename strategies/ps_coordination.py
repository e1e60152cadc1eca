"""How the tasks of a `ps` job coordinate through queues on the parameter servers.

The queues live on the parameter servers (ps 0, or every ps), so that any
training task can reach them:

* the chief's "variables initialized" token, which the other workers wait
  for instead of TensorFlow's 30-second readiness poll (`ChiefReadyHook`);
* the chief's "done training" tokens, after which the other workers stop
  (`StopWhenChiefDoneHook`);
* each worker's "training done" token on every ps, which a ps counts before
  it stops serving (`TrainingDoneHook`, `done_queue`);
* on SageMaker, each other worker's "session closed" report to the chief
  (`workers_closed_queue`).

`strategies.ps` uses them; the queues are created in each task's graph with
shared names, so every task's queue op is the same queue.
"""

import time
from typing import Callable, List

import tensorflow as tf
from absl import logging

from strategies import cluster as cluster_lib

DONE_QUEUE_NAME = "deepfm_training_done_ps_%d"
READY_QUEUE_NAME = "deepfm_chief_ready"
# A worker polls this often for the chief's "variables initialized" token,
# and gives up after CHIEF_READY_TIMEOUT_SECONDS (TensorFlow's own 30-second
# readiness polling then takes over).
CHIEF_READY_POLL_SECONDS = 0.2
CHIEF_READY_TIMEOUT_SECONDS = 600.0
# The chief leaves tokens here once done training (other workers then stop).
CHIEF_DONE_QUEUE_NAME = "deepfm_chief_done"
# Each other worker's report that its training session has closed (SageMaker, `finish_training`).
WORKERS_CLOSED_QUEUE_NAME = "deepfm_workers_closed"
# A worker looks for the chief's tokens every this many steps (the chief may stop early).
CHIEF_DONE_POLL_STEPS = 20


def done_queue(ps_index: int, num_workers: int) -> tf.queue.FIFOQueue:
    """The queue on parameter server `ps_index` where workers report the end of training.

    Workers and the ps build the same queue (the same `shared_name` and
    attributes), so they share one queue resource on that ps.

    Args:
      ps_index: the parameter server's task index.
      num_workers: training tasks of the job (the queue's capacity, so that
        no worker ever waits to report).

    Returns:
      A queue of int32 scalars: the reporting workers' indices.
    """
    with tf.device("/job:%s/task:%d" % (cluster_lib.PS, ps_index)):
        return tf.queue.FIFOQueue(num_workers, tf.int32, shapes=[[]], shared_name=DONE_QUEUE_NAME % ps_index,
                                  name="training_done_ps_%d" % ps_index)


def chief_done_queue(num_workers: int) -> tf.queue.FIFOQueue:
    """The queue on parameter server 0 where the chief leaves one token per other worker when done."""
    with tf.device("/job:%s/task:0" % cluster_lib.PS):
        return tf.queue.FIFOQueue(max(1, num_workers - 1), tf.int32, shapes=[[]],
                                  shared_name=CHIEF_DONE_QUEUE_NAME, name="chief_done")


def workers_closed_queue(num_workers: int) -> tf.queue.FIFOQueue:
    """The queue on parameter server 0 where each other worker reports its training session closed."""
    with tf.device("/job:%s/task:0" % cluster_lib.PS):
        return tf.queue.FIFOQueue(max(1, num_workers - 1), tf.int32, shapes=[[]],
                                  shared_name=WORKERS_CLOSED_QUEUE_NAME, name="workers_closed")


def chief_ready_queue() -> tf.queue.FIFOQueue:
    """The queue on parameter server 0 that holds a token once the chief initialized the variables."""
    with tf.device("/job:%s/task:0" % cluster_lib.PS):
        return tf.queue.FIFOQueue(1, tf.int32, shapes=[[]], shared_name=READY_QUEUE_NAME, name="chief_ready")


class StartServerHook(tf.estimator.SessionRunHook):
    """Starts this training task's gRPC server as a training session begins (once; later calls find it).

    A training task's sessions run on its own server (`RunConfig.master`,
    from `TF_CONFIG`), and the other hooks' barriers talk to it.

    Args:
      start: starts the server, or returns the one started already.
    """

    def __init__(self, start: Callable[[], tf.distribute.Server]):
        self._start = start

    def begin(self):
        self._start()


class ChiefReadyHook(tf.estimator.SessionRunHook):
    """Starts the workers as soon as the chief has initialized the variables.

    A non-chief worker's session otherwise checks the variables once and,
    finding them uninitialized, sleeps 30 seconds before checking again
    (TensorFlow's `SessionManager`), while the chief trains alone. The chief
    puts a token in `chief_ready_queue` once its session exists (its
    variables are then initialized); each other worker waits for the token,
    in a session of its own, before its training session is created.

    Args:
      cluster: the cluster and this (training) task.
      target: this task's gRPC session target.
      config: this task's session configuration.
      timeout_seconds: how long a worker waits for the token before leaving
        the wait to TensorFlow.
    """

    def __init__(self, cluster: cluster_lib.ClusterInfo, target: str, config: tf.compat.v1.ConfigProto,
                 timeout_seconds: float = CHIEF_READY_TIMEOUT_SECONDS):
        self._cluster = cluster
        self._target = target
        self._config = config
        self._timeout_seconds = timeout_seconds
        self._size = None
        self._enqueue = None

    def begin(self):
        if self._cluster.is_chief:
            queue = chief_ready_queue()
            self._size = queue.size()
            self._enqueue = queue.enqueue(0)
        else:
            self.wait_for_chief()

    def after_create_session(self, session, coord):
        del coord
        if self._cluster.is_chief and session.run(self._size) == 0:
            session.run(self._enqueue)

    def wait_for_chief(self) -> bool:
        """Blocks until the chief's token is there; False after the timeout."""
        start = time.monotonic()
        with tf.Graph().as_default():
            size = chief_ready_queue().size()
            with tf.compat.v1.Session(self._target, config=self._config) as session:
                while session.run(size) == 0:
                    if time.monotonic() - start > self._timeout_seconds:
                        logging.warning("%s: the chief has not initialized the variables after %.0f s; "
                                        "leaving the wait to TensorFlow", self._cluster.task_name,
                                        self._timeout_seconds)
                        return False
                    time.sleep(CHIEF_READY_POLL_SECONDS)
        logging.info("%s: the chief initialized the variables (waited %.1f s)", self._cluster.task_name,
                     time.monotonic() - start)
        return True


class StopWhenChiefDoneHook(tf.estimator.SessionRunHook):
    """Stops a (non-chief) worker once the chief has finished training.

    The chief may stop early (evaluation during training, early stopping);
    its tokens in `chief_done_queue` then tell the other workers to stop
    too. The queue's size is fetched with every `every_n_steps`-th step.

    Args:
      cluster: the cluster and this (training) task.
      every_n_steps: how often to look.
    """

    def __init__(self, cluster: cluster_lib.ClusterInfo, every_n_steps: int = CHIEF_DONE_POLL_STEPS):
        self._cluster = cluster
        self._every_n_steps = every_n_steps
        self._size = None
        self._steps = 0

    def begin(self):
        self._size = chief_done_queue(self._cluster.num_workers).size()
        self._steps = 0

    def before_run(self, run_context):
        self._steps += 1
        if self._steps % self._every_n_steps:
            return None
        return tf.estimator.SessionRunArgs(self._size)

    def after_run(self, run_context, run_values):
        if run_values.results:
            logging.info("%s: the chief finished training; stopping", self._cluster.task_name)
            run_context.request_stop()


class TrainingDoneHook(tf.estimator.SessionRunHook):
    """Tells every parameter server that this worker finished training.

    Its `end` runs after the chief's final checkpoint is saved (Estimator
    runs the chief-only hooks, the checkpoint saver among them, first). The
    chief first leaves one token per other worker in `chief_done_queue`, so
    that workers still training stop (`StopWhenChiefDoneHook`).

    Args:
      cluster: the cluster and this (training) task.
    """

    def __init__(self, cluster: cluster_lib.ClusterInfo):
        self._cluster = cluster
        self._enqueue_ops: List[tf.Operation] = []

    def begin(self):
        cluster = self._cluster
        worker = tf.constant(cluster.worker_index, tf.int32)
        self._enqueue_ops = [done_queue(ps, cluster.num_workers).enqueue(worker)
                             for ps in range(cluster.num_ps)]
        if cluster.is_chief and cluster.num_workers > 1:
            self._enqueue_ops.insert(0, chief_done_queue(cluster.num_workers).enqueue_many(
                [[0] * (cluster.num_workers - 1)]))

    def end(self, session):
        for op in self._enqueue_ops:
            session.run(op)
        logging.info("%s finished training; told %d parameter server(s)",
                     self._cluster.task_name, self._cluster.num_ps)
