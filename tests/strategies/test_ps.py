"""Tests of the `ps` strategy: TF_CONFIG roles, placement, the end of the job, training.

The end-to-end test starts a real gRPC cluster on localhost through
`deepfm.launch` (2 parameter servers, a chief and a worker of two towers
each) on synthetic data; `check_finished_job` checks what such a job leaves
(also on tests/strategies/test_parity.py's job without towers).
"""

import collections
import glob
import json
import os
import re
import socket
import tempfile
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from absl.testing import parameterized

import strategies
from dataprep import synthetic
from deepfm.config import ModelConfig
from deepfm.models import ctr
from deepfm.models import deepfm as model_lib
from input_pipeline import schema
from jobs.local import processes
from strategies import cluster as cluster_lib
from strategies import ps, ps_coordination, server_ports
from tests.jobs.local import launch_testing

CLUSTER = {"chief": ["localhost:1"], "worker": ["localhost:2"], "ps": ["localhost:3", "localhost:4"]}
FEATURE_SIZE = 2000
FIELD_SIZE = 39
MODEL = ModelConfig(feature_size=FEATURE_SIZE, field_size=FIELD_SIZE, embedding_size=8, deep_layers=(16, 8),
                    dropout=(0.0, 0.0))
# Largest / smallest bytes a parameter server may hold.
MAX_PS_IMBALANCE = 2.0
SAMPLE_MAX_PS_IMBALANCE = 1.1
SERVE_TIMEOUT_S = 30
# 18000 training rows in 4 files: each of the 2 workers reads 2 files, 70 batches of 128.
DATASET_ROWS = 20000
BATCH_SIZE = 128
STEPS_PER_WORKER = 70
# The chief writes its loss every LOG_EVERY_N_STEPS global steps; its own 70 steps span at least 70
# global steps whichever worker runs ahead, so it writes at least three losses.
LOG_EVERY_N_STEPS = 20
MIN_AUC = 0.65


def set_tf_config(test_case, task_type, index=0, jobs=None):
    """Sets TF_CONFIG for the rest of the test (restored afterwards)."""
    previous = os.environ.get(cluster_lib.TF_CONFIG_VARIABLE)

    def restore():
        if previous is None:
            os.environ.pop(cluster_lib.TF_CONFIG_VARIABLE, None)
        else:
            os.environ[cluster_lib.TF_CONFIG_VARIABLE] = previous
    test_case.addCleanup(restore)
    os.environ[cluster_lib.TF_CONFIG_VARIABLE] = json.dumps(
        {"cluster": jobs or CLUSTER, "task": {"type": task_type, "index": index}})


def make_strategy(test_case, task_type, index=0, jobs=None, **options):
    """A built `ps` strategy of the task `task_type` `index` (not set up)."""
    set_tf_config(test_case, task_type, index, jobs)
    return strategies.get(strategies.make_config(name="ps", **options))


def set_up_strategy(test_case, task_type, index=0, jobs=None, **options):
    """A `ps` strategy of the task `task_type` `index`, set up (which starts nothing)."""
    strategy = make_strategy(test_case, task_type, index, jobs, **options)
    strategy.setup()
    return strategy


def prepared_strategy(test_case, task_type, index=0, jobs=None, **options):
    """A `ps` strategy of the task, set up and prepared for a run in a temporary directory."""
    strategy = set_up_strategy(test_case, task_type, index, jobs, **options)
    strategy.prepare(strategies.Plan(model_dir=test_case.create_tempdir().full_path))
    return strategy


class RolesTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("chief", "chief", 0, "worker", True, 0),
        ("worker", "worker", 0, "worker", False, 1),
        ("ps", "ps", 1, "ps", False, None),
    )
    def test_roles(self, task_type, index, role, is_chief, pipeline_id):
        strategy = make_strategy(self, task_type, index, ps_lr_factor=0.5)
        topology = strategy.setup()
        self.assertEqual(topology.role, role)
        self.assertEqual(topology.is_chief, is_chief)
        self.assertEqual(topology.evaluates, is_chief)
        self.assertEqual(topology.workers, 2)
        self.assertEqual(topology.replicas_in_sync, 1)
        self.assertEqual(topology.task, "%s_%d" % (task_type, index))
        self.assertEqual(topology.job_name, task_type)
        self.assertFalse(topology.lockstep)
        self.assertEqual(strategy.input_plan().global_max_steps(30), 60)
        self.assertEqual(strategy.model_context(tf.estimator.ModeKeys.TRAIN).learning_rate_factor, 0.5)
        self.assertIn("2 parameter server(s), 2 worker(s)", strategy.describe())
        if pipeline_id is not None:
            context = strategy.input_plan().context
            self.assertEqual((context.num_input_pipelines, context.input_pipeline_id), (2, pipeline_id))

    def test_s3_sharded_input_is_not_sharded_again(self):
        context = set_up_strategy(self, "worker", s3_sharded=True).input_plan().context
        self.assertEqual((context.num_input_pipelines, context.input_pipeline_id), (1, 0))

    def test_pipe_channel(self):
        self.assertEqual(set_up_strategy(self, "worker", train_channels=("a", "b")).input_plan().pipe_channel(), "a")
        with self.assertRaisesRegex(ValueError, "--train_channels"):
            set_up_strategy(self, "worker").input_plan().pipe_channel()

    @parameterized.named_parameters(
        ("chief", "chief", 0, ["/job:ps", "/job:chief/task:0"]),
        ("worker", "worker", 0, ["/job:ps", "/job:worker/task:0"]),
        ("ps", "ps", 1, ["/job:ps/task:1"]),
    )
    def test_device_filters(self, task_type, index, filters):
        strategy = set_up_strategy(self, task_type, index, intra_op_threads=2)
        config = strategy._session_config()
        self.assertEqual(list(config.device_filters), filters)
        self.assertEqual(config.intra_op_parallelism_threads, 2)

    def test_run_config_comes_from_tf_config(self):
        run_config = prepared_strategy(self, "worker").run.run_config
        self.assertEqual(run_config.task_type, "worker")
        self.assertFalse(run_config.is_chief)
        self.assertEqual(run_config.num_ps_replicas, 2)
        self.assertEqual(run_config.master, "grpc://localhost:2")
        self.assertIsInstance(run_config.device_fn, ps.VariablePlacer)
        self.assertEqual(list(run_config.session_config.device_filters), ["/job:ps", "/job:worker/task:0"])

    def test_sagemaker_master(self):
        jobs = {"master": ["algo-1:2222"], "ps": ["algo-1:2223"]}
        strategy = prepared_strategy(self, "master", jobs=jobs)
        self.assertTrue(strategy.topology.is_chief)
        self.assertTrue(strategy.run.run_config.is_chief)

    @parameterized.named_parameters(
        ("no_ps", {"chief": ["a:1"], "worker": ["b:1"]}, {}, r"at least one ps task.*\['chief', 'worker'\]"),
        ("lr_factor", CLUSTER, {"ps_lr_factor": 0.0}, "--ps_lr_factor must be > 0, got 0.0"),
        ("negative_towers", CLUSTER, {"ps_towers": -1}, "--ps_towers must be >= 0, got -1"),
    )
    def test_bad_configuration(self, jobs, options, message):
        with self.assertRaisesRegex(ValueError, message):
            make_strategy(self, "chief", jobs=jobs, **options).setup()

    def test_only_training_tasks_depend_on_the_parameter_servers(self):
        self.assertEqual({"ps_0": "localhost:3", "ps_1": "localhost:4"},
                         set_up_strategy(self, "worker").topology.peers)
        self.assertEqual({}, set_up_strategy(self, "ps", 1).topology.peers)

    def test_missing_tf_config(self):
        set_tf_config(self, "chief")
        del os.environ[cluster_lib.TF_CONFIG_VARIABLE]
        strategy = strategies.get(strategies.make_config(name="ps"))
        with self.assertRaisesRegex(ValueError, "--strategy ps: TF_CONFIG is not set"):
            strategy.setup()


def build_training_graph(strategy, model=MODEL):
    """The TRAIN graph of `model` as `strategy` places it; returns the graph."""
    graph = tf.Graph()
    with graph.as_default(), graph.device(strategy.run.run_config.device_fn):
        tf.compat.v1.train.get_or_create_global_step()
        features = {schema.FEAT_IDS: tf.zeros([8, model.field_size], tf.int64),
                    schema.FEAT_VALS: tf.ones([8, model.field_size])}
        model_fn = strategy.wrap_model_fn(model_lib.model_fn)
        model_fn(features, tf.zeros([8]), tf.estimator.ModeKeys.TRAIN, ctr.model_params(model))
    return graph


def variable_bytes_per_ps(graph):
    per_ps = collections.Counter()
    with graph.as_default():
        for variable in tf.compat.v1.global_variables():
            per_ps[tf.DeviceSpec.from_string(variable.device).task] += (
                variable.shape.num_elements() * variable.dtype.size)
    return per_ps


class PlacementTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(("no_towers", 0), ("two_towers", 2))
    def test_variables_on_ps_balanced_and_ops_on_the_worker(self, towers):
        graph = build_training_graph(prepared_strategy(self, "worker", ps_towers=towers))
        with graph.as_default():
            variables = tf.compat.v1.global_variables()
        for variable in variables:
            self.assertRegex(variable.device, r"^/job:ps/task:[01]$", variable.name)
        for table in ("fm_w", "fm_v"):
            parts = [v for v in variables if re.match(r"%s/%s/part_\d+:0$" % (model_lib.SCOPE, table), v.name)]
            self.assertLen(parts, 2, [v.name for v in parts])
            self.assertEqual({v.device for v in parts}, {"/job:ps/task:0", "/job:ps/task:1"})
            self.assertEqual(sum(v.shape[0] for v in parts), FEATURE_SIZE)
        # The saver the strategy installs in training (`strategies.saving`): each ps saves its own variables.
        with graph.as_default():
            self.assertLen(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS), 1)
        save_tasks = sorted((spec.job, spec.task) for spec in (tf.DeviceSpec.from_string(op.device)
                                                               for op in graph.get_operations() if op.type == "SaveV2"))
        self.assertEqual(save_tasks, [("ps", 0), ("ps", 1)])
        per_ps = variable_bytes_per_ps(graph)
        self.assertLen(per_ps, 2)
        self.assertLessEqual(max(per_ps.values()), MAX_PS_IMBALANCE * min(per_ps.values()), per_ps)
        compute_devices = {op.device for op in graph.get_operations()
                           if op.type == "MatMul" and not op.device.startswith("/job:ps")}
        self.assertNotEmpty(compute_devices)
        for device in compute_devices:
            self.assertTrue(device.startswith("/job:worker/task:0"), device)
        if towers:
            self.assertEqual({tf.DeviceSpec.from_string(d).device_index for d in compute_devices}, {1, 2})

    def test_sample_sized_model_is_balanced_closely(self):
        # The SageMaker sample's sizes (117581 ids, embedding 32): the tables dominate.
        graph = build_training_graph(prepared_strategy(self, "worker"),
                                     ModelConfig(feature_size=synthetic.DEFAULT_FEATURE_SIZE))
        per_ps = variable_bytes_per_ps(graph)
        self.assertLen(per_ps, 2)
        self.assertLessEqual(max(per_ps.values()), SAMPLE_MAX_PS_IMBALANCE * min(per_ps.values()), per_ps)

    def test_towers_scale_the_batch_and_create_devices(self):
        strategy = set_up_strategy(self, "chief", ps_towers=2)
        self.assertEqual(strategy.topology.replicas_in_sync, 2)
        self.assertEqual(strategy.input_plan().batch_per_input_pipeline(64), 128)
        self.assertEqual(strategy._session_config().device_count["CPU"], 3)
        self.assertEqual(list(strategy._session_config().device_filters), ["/job:ps", "/job:chief/task:0"])
        self.assertIn("2 tower(s) per worker", strategy.describe())

    def test_parameter_servers_build_no_towers(self):
        # A ps sees no GPU (the launcher hides them): towers on GPUs must not fail it.
        strategy = set_up_strategy(self, "ps", ps_towers=2, device_type="gpu")
        self.assertEqual(strategy._session_config().device_count["CPU"], 0)

    def test_placer_honours_an_explicit_job(self):
        graph = tf.Graph()
        with graph.as_default(), graph.device(prepared_strategy(self, "worker").run.run_config.device_fn):
            queue = ps_coordination.done_queue(1, num_workers=2)
        self.assertStartsWith(queue.queue_ref.device, "/job:ps/task:1")


def hook_of(strategy, hook_type):
    (hook,) = [h for h in strategy.run.train_hooks if isinstance(h, hook_type)]
    return hook


class InProcessClusterTest(tf.test.TestCase):
    """A real gRPC cluster in this process: one parameter server, a chief and a worker."""

    def setUp(self):
        super().setUp()
        self.jobs = cluster_lib.local_cluster(num_ps=1, num_workers=2, ports=processes.free_ports(3))
        parameter_server = set_up_strategy(self, "ps", jobs=self.jobs)
        self.served = threading.Event()
        # The training tasks' servers live in this process and never exit: the ps looks for them once.
        self.ps_thread = threading.Thread(
            target=lambda: (parameter_server.serve(exit_timeout_seconds=0), self.served.set()), daemon=True)
        self.ps_thread.start()
        self.tasks = {}
        for task_type in ("chief", "worker"):
            strategy = prepared_strategy(self, task_type, jobs=self.jobs)
            hook_of(strategy, ps_coordination.StartServerHook).begin()  # starts the task's server
            self.tasks[task_type] = strategy

    def tearDown(self):
        # Lets the parameter server return: every worker reports the end of training.
        if not self.served.is_set():
            for strategy in self.tasks.values():
                self.finish(strategy)
        self.ps_thread.join(SERVE_TIMEOUT_S)
        super().tearDown()

    def session(self, strategy):
        target = "grpc://" + strategy.cluster.task_address
        return tf.compat.v1.Session(target, config=strategy._session_config())

    def finish(self, strategy):
        hook = hook_of(strategy, ps_coordination.TrainingDoneHook)
        with tf.Graph().as_default():
            hook.begin()
            with self.session(strategy) as session:
                hook.end(session)

    def test_serve_returns_after_every_worker_finished(self):
        for task_type in ("chief", "worker"):
            self.assertFalse(self.served.is_set(), "the ps returned before %s finished" % task_type)
            self.finish(self.tasks[task_type])
        self.assertTrue(self.served.wait(SERVE_TIMEOUT_S), "the ps did not return after both workers finished")

    def test_worker_waits_for_the_chief(self):
        worker_ready = threading.Event()

        def start_worker():
            with tf.Graph().as_default():
                hook_of(self.tasks["worker"], ps_coordination.ChiefReadyHook).begin()
            worker_ready.set()
        thread = threading.Thread(target=start_worker, daemon=True)
        thread.start()
        self.assertFalse(worker_ready.wait(1.0), "the worker did not wait for the chief")
        chief_hook = hook_of(self.tasks["chief"], ps_coordination.ChiefReadyHook)
        with tf.Graph().as_default():
            chief_hook.begin()
            with self.session(self.tasks["chief"]) as session:
                chief_hook.after_create_session(session, None)
                chief_hook.after_create_session(session, None)  # a second chief session adds nothing
                self.assertEqual(session.run(ps_coordination.chief_ready_queue().size()), 1)
        self.assertTrue(worker_ready.wait(SERVE_TIMEOUT_S), "the worker did not see the chief's token")
        thread.join(SERVE_TIMEOUT_S)

    def test_worker_gives_up_waiting_after_the_timeout(self):
        worker = self.tasks["worker"]
        hook = ps_coordination.ChiefReadyHook(worker.cluster, "grpc://" + worker.cluster.task_address,
                                              worker._session_config(), timeout_seconds=0.5)
        self.assertFalse(hook.wait_for_chief())


def event_scalars(directory, tag):
    """(step, value) of a scalar summary in the event files of `directory`, by step."""
    values = []
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            values.extend((event.step, value.simple_value) for value in event.summary.value if value.tag == tag)
    return sorted(values)


def write_dataset(root):
    """A small synthetic dataset; returns its metadata."""
    return synthetic.generate(DATASET_ROWS, root, feature_size=FEATURE_SIZE, seed=1)


def base_rate_logloss(root):
    """The log loss of always predicting the validation split's positive rate."""
    labels = []
    for path in sorted(glob.glob(os.path.join(root, "validation", "*.libsvm"))):
        with open(path) as f:
            labels.extend(float(line.split(" ", 1)[0]) for line in f if line.strip())
    rate = np.mean(labels)
    return -(rate * np.log(rate) + (1 - rate) * np.log(1 - rate))


@pytest.mark.slow
class ServeUntilTrainingExitsTest(tf.test.TestCase):
    """A real parameter server stays until every training task's process is gone, not only its token.

    The training tasks are listening sockets of this test: closing one is
    its process exiting (its gRPC port closes).
    """

    def setUp(self):
        super().setUp()
        self.listeners = {}
        for task in ("chief", "worker"):
            listener = socket.socket()
            self.addCleanup(listener.close)
            listener.bind(("localhost", 0))
            listener.listen()
            self.listeners[task] = listener
        self.jobs = {task: ["localhost:%d" % listener.getsockname()[1]] for task, listener in self.listeners.items()}
        self.jobs["ps"] = ["localhost:%d" % processes.free_ports(1)[0]]
        parameter_server = set_up_strategy(self, "ps", jobs=self.jobs)
        self.served = threading.Event()
        thread = threading.Thread(
            target=lambda: (parameter_server.serve(exit_timeout_seconds=SERVE_TIMEOUT_S), self.served.set()),
            daemon=True)
        thread.start()
        self.addCleanup(thread.join, SERVE_TIMEOUT_S)
        self.addCleanup(self.close_listeners)

    def close_listeners(self):
        for listener in self.listeners.values():
            listener.close()

    def report_both_done(self):
        """Both training tasks' tokens, as `TrainingDoneHook` puts them, from a session on the ps alone."""
        deadline = time.monotonic() + SERVE_TIMEOUT_S
        while not server_ports.accepts_connections(self.jobs["ps"][0], 1.0) and time.monotonic() < deadline:
            time.sleep(0.1)
        config = tf.compat.v1.ConfigProto(device_filters=["/job:ps/task:0"])
        with tf.Graph().as_default():
            enqueue = ps_coordination.done_queue(0, 2).enqueue_many([[0, 1]])
            with tf.compat.v1.Session("grpc://" + self.jobs["ps"][0], config=config) as session:
                session.run(enqueue)

    def test_the_ps_returns_once_every_training_process_exited(self):
        self.report_both_done()
        self.assertFalse(self.served.wait(2.0), "the ps returned while both training tasks were up")
        self.listeners["chief"].close()
        self.assertFalse(self.served.wait(1.0), "the ps returned while the worker was up")
        self.listeners["worker"].close()
        self.assertTrue(self.served.wait(SERVE_TIMEOUT_S), "the ps did not return after both exited")

    def test_wait_until_all_closed_names_what_is_still_up(self):
        addresses = {task: address for task, (address,) in self.jobs.items() if task != "ps"}
        self.assertEqual(["chief", "worker"], server_ports.wait_until_all_closed(addresses, 0.3, 0.1))
        self.listeners["worker"].close()
        self.assertEqual(["chief"], server_ports.wait_until_all_closed(addresses, 0.3, 0.1))
        self.close_listeners()
        self.assertEqual([], server_ports.wait_until_all_closed(addresses, 0.3, 0.1))
        self.report_both_done()  # lets the ps of setUp return


def check_finished_job(test, data_root, model_dir, log_dir, metrics_file, export_dir, steps_per_worker,
                       balanced=True):
    """What a finished job of 2 parameter servers, a chief and a worker leaves, checked on `test`.

    Its tasks' logs, the chief's losses and metrics, the global step of two
    asynchronous workers, the export, the checkpoint's shard per parameter
    server, and every task's end.

    Args:
      balanced: the shards' sizes within MAX_PS_IMBALANCE (a model whose
        tables outweigh its dense layers, as MODEL's: the dense variables
        are not split).

    Returns:
      The chief's metrics.
    """
    logs = sorted(os.path.basename(path)[:-len(".log")] for path in glob.glob(os.path.join(log_dir, "*.log")))
    test.assertEqual(["chief_0", "ps_0", "ps_1", "worker_0"], logs)

    def log(task):
        with open(os.path.join(log_dir, task + ".log"), errors="replace") as f:
            return f.read()

    with open(metrics_file) as f:
        metrics = json.load(f)
    losses = event_scalars(model_dir, "loss")
    test.assertGreaterEqual(len(losses), 2, losses)
    test.assertLess(losses[-1][1], losses[0][1], losses)
    test.assertGreater(metrics["auc"], MIN_AUC, metrics)
    test.assertLess(metrics["logloss"], base_rate_logloss(data_root), metrics)
    # Both workers advance the global step; each may run one step past the budget (the step
    # read with its last step may be one behind the other worker's update).
    test.assertBetween(metrics["global_step"], 2 * steps_per_worker, 2 * steps_per_worker + 2)
    for task in ("chief_0", "worker_0"):
        test.assertIn("%s finished training" % task, log(task))
    # The worker trained alongside the chief: it did not wait for TensorFlow's 30-second poll.
    test.assertIn("the chief initialized the variables", log("worker_0"))
    test.assertNotIn("Waiting for model to be ready", log("worker_0"))
    test.assertNotEmpty(glob.glob(os.path.join(export_dir, "*", "saved_model.pb")))

    checkpoint = tf.train.latest_checkpoint(model_dir)
    shards = sorted(glob.glob(checkpoint + ".data-*"))
    test.assertEqual([os.path.basename(s)[-len("00000-of-00002"):] for s in shards],
                     ["00000-of-00002", "00001-of-00002"])
    sizes = [os.path.getsize(s) for s in shards]
    if balanced:
        test.assertLessEqual(max(sizes), MAX_PS_IMBALANCE * min(sizes), sizes)
    for ps_index in range(2):
        # It stayed until the training tasks' processes had exited.
        test.assertIn("every worker finished and exited", log("ps_%d" % ps_index))
    return metrics


@pytest.mark.slow
class EndToEndTest(tf.test.TestCase):
    """2 ps + a chief and a worker of 2 towers each, started by `deepfm.launch`, train on synthetic data.

    The same job without towers is `tests/strategies/test_parity.py`'s `ps` job, with the same checks.
    """

    def test_train_through_the_launcher_with_two_towers_per_worker(self):
        root = tempfile.mkdtemp(dir=tf.compat.v1.test.get_temp_dir())
        write_dataset(root)
        work = self.create_tempdir("run").full_path
        model_dir = os.path.join(work, "model")
        metrics_file = os.path.join(work, "metrics.json")
        export_dir = os.path.join(work, "export")
        towers = 2
        # Each worker step reads BATCH_SIZE examples: two towers' halves.
        job = launch_testing.LaunchedJob(
            self, ["--strategy", "ps", "--num_ps", "2", "--num_workers", "2"], os.path.join(work, "logs"),
            ["--train_data", root, "--model_dir", model_dir, "--metrics_file", metrics_file,
             "--export_dir", export_dir, "--batch_size", str(BATCH_SIZE // towers), "--ps_towers", str(towers),
             "--embedding_size", "8",
             "--deep_layers", "16,8", "--dropout", "0,0", "--learning_rate", "0.005", "--num_epochs", "1",
             "--ps_lr_factor", "0.8", "--seed", "1", "--save_checkpoints_steps", "50",
             "--log_every_n_steps", str(LOG_EVERY_N_STEPS)])
        returncode, output = job.wait()
        self.assertEqual(returncode, 0, output)
        self.assertEqual(sorted(job.task_pids()), ["chief_0", "ps_0", "ps_1", "worker_0"])
        job.assert_no_process_left()
        metrics = check_finished_job(self, root, model_dir, job.log_dir, metrics_file, export_dir, STEPS_PER_WORKER)
        self.assertIn("%d tower(s) per worker" % towers, metrics["strategy"])


if __name__ == "__main__":
    tf.test.main()
