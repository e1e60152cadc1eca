"""Real SageMaker jobs on emulated hosts: `python -m deepfm.sagemaker local` with SageMaker's own toolkit.

Each test runs a tiny job end to end: the toolkit builds `TF_CONFIG` and
starts the parameter servers, or runs `mpirun` over ssh between the hosts'
network namespaces. They need root (namespaces), Open MPI and an ssh server,
and skip with the reason otherwise. The two-host parameter-server job of
docs/sagemaker.md is checked on the page's own run (`SageMakerTest` in
tests/test_docs_commands.py): its hosts' outputs, its checkpoints with both
parameter servers' shards at its last step.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time

import pytest
import tensorflow as tf

from dataprep import synthetic
from input_pipeline import check_record, schema
from jobs import spec as spec_lib
from jobs.local import hosts, memory
from jobs.sagemaker import local as sagemaker_local
from jobs.sagemaker import metrics as sagemaker_metrics
from strategies import strategy_names
from tests import command_line, paths

REPO_ROOT = paths.REPO_ROOT
JOB_TIMEOUT_S = 300
FEATURE_SIZE = 500
ROWS = 6_000
SHARDS = 2
BATCH = 128
HYPERPARAMETERS = ("--batch_size", str(BATCH), "--embedding_size", "4", "--deep_layers", "8", "--dropout", "0",
                   "--learning_rate", "0.01", "--num_epochs", "2", "--feature_size", str(FEATURE_SIZE))
TRAIN_ROWS = 5_400  # 90% of ROWS; the rest is validation
MIN_AUC = 0.6
# Without --feature_size: the job finds the dataset's sizes in its channels.
LOG_EVERY = 20
WITHOUT_SIZES = HYPERPARAMETERS[:-2] + ("--log_every_n_steps", str(LOG_EVERY))
# A raw absl record (`I1128 09:06:11.827495 140448693765824 pipe_feeder.py:269] ...`): a job's console
# carries the library's own lines only; the hosts' detail is in their logs.
# The name of the Pipe-mode MPI job among the jobs run side by side.
PIPE_JOB = "pipe"
# The strategy of the MPI job over two hosts.
TWO_HOST_STRATEGY = strategy_names.HYBRID
ABSL_RECORD = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]", re.MULTILINE)


def read_text(path):
    with open(path) as f:
        return f.read()


def missing_requirements():
    reason = hosts.check_privileges()
    if reason:
        return reason
    for tool in ("mpirun", "orted", "ssh-keygen", "curl"):
        if shutil.which(tool) is None:
            return "%s is not installed (Debian packages openmpi-bin, openssh-client, curl)" % tool
    if not os.path.exists("/usr/sbin/sshd"):
        return "/usr/sbin/sshd is not installed (Debian package openssh-server)"
    return None


@pytest.mark.slow
class LocalJobTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = os.path.join(tf.compat.v1.test.get_temp_dir(), "sagemaker_local")
        cls.data = os.path.join(cls.root, "data")
        if not os.path.exists(cls.data):
            synthetic.generate(ROWS, cls.data, feature_size=FEATURE_SIZE, seed=3, shards=SHARDS)
        # Channels of TFRecord files only, as an S3 prefix would hold them.
        cls.channels = {}
        for name, pattern in (("a", "train/part-00000"), ("b", "train/part-0000"), ("val", "validation/part-0000")):
            directory = os.path.join(cls.root, "channels", name)
            os.makedirs(directory, exist_ok=True)
            for path in tf.io.gfile.glob(os.path.join(cls.data, pattern + "*.tfrecord")):
                shutil.copy(path, directory)
            cls.channels[name] = directory

    def setUp(self):
        super().setUp()
        reason = missing_requirements()
        if reason:
            self.skipTest(reason)

    def start(self, output_dir, *args, hyperparameters=HYPERPARAMETERS, stdout=subprocess.PIPE,
              stderr=subprocess.PIPE):
        argv = command_line.python_module("deepfm.sagemaker", "local", "--output_dir", output_dir,
                                          "--timeout_s", str(JOB_TIMEOUT_S), *args, "--", *hyperparameters)
        process = command_line.start(argv, self.get_temp_dir(), stdout=stdout, stderr=stderr, text=True)
        self.addCleanup(self._stop, process)
        return process

    def _stop(self, process):
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        leftover = [name for name in hosts.list_namespaces()
                    if name.startswith("%s-%d-" % (hosts.NAMESPACE_PREFIX, process.pid))]
        for name in leftover:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
        self.assertEqual([], leftover, "namespaces left behind")

    def run_job(self, *args, hyperparameters=HYPERPARAMETERS):
        output_dir = self.create_tempdir().full_path
        process = self.start(output_dir, *args, hyperparameters=hyperparameters)
        out, err = process.communicate(timeout=JOB_TIMEOUT_S + 60)
        self.assert_succeeded(process, out, err)
        return output_dir, out

    def run_jobs(self, jobs):
        """Runs `jobs` side by side and checks each as `run_job` does.

        An MPI job ends with the SageMaker toolkit's waits, 30 seconds on
        every host after `mpirun` returns; jobs side by side wait together.

        Args:
          jobs: name -> (the emulator's arguments, the hyperparameters).

        Returns:
          name -> (the job's output directory, its standard output).
        """
        started = {}
        for name, (args, hyperparameters) in jobs.items():
            output_dir = self.create_tempdir().full_path
            console = self.create_tempdir().full_path
            paths_of = tuple(os.path.join(console, stream) for stream in ("stdout", "stderr"))
            # Files, not pipes: a job blocked on a full pipe would wait for the test to read the one before it.
            with open(paths_of[0], "w") as stdout, open(paths_of[1], "w") as stderr:
                process = self.start(output_dir, *args, hyperparameters=hyperparameters, stdout=stdout,
                                     stderr=stderr)
            started[name] = (output_dir, process, paths_of)
        results = {}
        for name, (output_dir, process, paths_of) in started.items():
            process.wait(timeout=JOB_TIMEOUT_S + 60)
            out, err = (read_text(path) for path in paths_of)
            with self.subTest(job=name):
                self.assert_succeeded(process, out, err)
            results[name] = (output_dir, out)
        return results

    def assert_succeeded(self, process, out, err):
        """The emulator exited 0 with the library's own lines on its console and left no namespace."""
        self.assertEqual(0, process.returncode, "stdout:\n%s\nstderr:\n%s" % (out[-3000:], err[-5000:]))
        self.assertEqual([], ABSL_RECORD.findall(out + err), "raw log records on the console:\n%s" % err[-3000:])
        self.assert_no_leftovers(process.pid)

    def assert_no_leftovers(self, pid):
        self.assertEqual([], [name for name in hosts.list_namespaces()
                              if name.startswith("%s-%d-" % (hosts.NAMESPACE_PREFIX, pid))])
        self.assertEqual([], [name for name in os.listdir(hosts.NETNS_ETC)
                              if name.startswith("%s-%d-" % (hosts.NAMESPACE_PREFIX, pid))]
                         if os.path.isdir(hosts.NETNS_ETC) else [])

    def metrics(self, output_dir, host="algo-1"):
        with open(os.path.join(output_dir, host, "output", "data", "metrics.json")) as f:
            return json.load(f)

    def exports(self, output_dir, host):
        return tf.io.gfile.glob(os.path.join(output_dir, host, "model", "*", "saved_model.pb"))

    def test_mpi_over_two_hosts_with_sharded_channels_and_over_two_processes_of_one_in_pipe_mode(self):
        # Two MPI jobs side by side (`run_jobs`: their toolkits' final waits overlap): `hybrid` over two hosts
        # with a channel sharded by key, and two processes of one host reading unequal channels in Pipe mode
        # with MPI's default strategy, `horovod`. (`horovod` over two hosts is `hybrid`'s launch: the same
        # toolkit, mpirun and ssh; its ranks' exchange over two hosts' links is measured by
        # tests/benchmarks/test_scale_out.py.)
        sharded = ("--instance_count", "2", "--distribution", "mpi", "--channel", "train=%s" % self.channels["b"],
                   "--channel", "validation=%s" % self.channels["val"], "--distribution_type", "ShardedByS3Key")
        jobs = {TWO_HOST_STRATEGY: (sharded, HYPERPARAMETERS + ("--strategy", TWO_HOST_STRATEGY))}
        jobs[PIPE_JOB] = (("--distribution", "mpi", "--processes_per_host", "2", "--input_mode", "Pipe",
                           "--channel", "train_0=%s" % self.channels["a"],
                           "--channel", "train_1=%s" % self.channels["b"],
                           "--channel", "validation=%s" % self.channels["val"]), HYPERPARAMETERS)
        results = self.run_jobs(jobs)
        with self.subTest(strategy=TWO_HOST_STRATEGY):
            self.assert_sharded_channels_trained(TWO_HOST_STRATEGY, results[TWO_HOST_STRATEGY][0])
        with self.subTest(job=PIPE_JOB):
            self.assert_pipe_mode_trained(results[PIPE_JOB][0])

    def assert_sharded_channels_trained(self, strategy, output_dir):
        """Two hosts, one rank each, each host given its share of the channel's files (ShardedByS3Key)."""
        # What each host received of the channel (a record of the data check is copied with it where one is
        # beside the source folder; the job keeps its own in the model directory, never in a channel).
        shares = [sorted(set(os.listdir(os.path.join(output_dir, host, "input", "data", "train")))
                         - {check_record.RECORD_FILE})
                  for host in ("algo-1", "algo-2")]
        self.assertEqual([["part-00000.tfrecord"], ["part-00001.tfrecord"]], shares)
        metrics = self.metrics(output_dir)
        self.assertIn("%s: rank 0 of 2 (local rank 0 of 1)" % strategy, metrics["strategy"])
        self.assertEqual(2 * ((TRAIN_ROWS // SHARDS) // BATCH), metrics["global_step"])
        self.assertGreater(metrics["auc"], MIN_AUC)
        self.assertLen(self.exports(output_dir, "algo-1"), 1)
        self.assertEqual([], self.exports(output_dir, "algo-2"))
        with open(os.path.join(output_dir, "logs", "algo-1.log")) as f:
            log = f.read()
        self.assertIn("mpirun --host algo-1,algo-2 -np 2", log)
        self.assertRegex(log, r"Data for node: algo-2\s+Num slots: 1")

    def assert_pipe_mode_trained(self, output_dir):
        """Two ranks of one host, each reading its own Pipe-mode channel of unequal length."""
        metrics = self.metrics(output_dir)
        self.assertIn("rank 0 of 2 (local rank 0 of 2)", metrics["strategy"])
        # train_0 holds one shard, train_1 two: the ranks stop together when train_0's
        # second epoch (its last FIFO) ends.
        self.assertEqual(2 * ((TRAIN_ROWS // SHARDS) // BATCH), metrics["global_step"])
        self.assertGreater(metrics["auc"], MIN_AUC)
        self.assertLen(self.exports(output_dir, "algo-1"), 1)
        with open(os.path.join(output_dir, "algo-1", "input", "config", "inputdataconfig.json")) as f:
            self.assertEqual("Pipe", json.load(f)["train_1"]["TrainingInputMode"])

    def assert_split_channels_trained(self, output_dir, out):
        """The job trained every epoch without --feature_size, and its log's metric series match its result."""
        metrics = self.metrics(output_dir)
        self.assertEqual(2 * (TRAIN_ROWS // BATCH), metrics["global_step"])
        self.assertGreater(metrics["auc"], MIN_AUC)
        self.assertLen(self.exports(output_dir, "algo-1"), 1)
        with open(os.path.join(output_dir, sagemaker_local.METRIC_SERIES)) as f:
            series = json.load(f)["algo-1"]
        # A progress line every 20 of the 84 steps and one at the end, and the summary's validation metrics.
        lines = metrics["global_step"] // LOG_EVERY + 1
        self.assertLen(series[sagemaker_metrics.TRAIN_LOSS], lines)
        self.assertLen(series[sagemaker_metrics.TRAIN_EXAMPLES_PER_SEC], lines)
        self.assertEqual([round(metrics["auc"], 4)], series[sagemaker_metrics.VALIDATION_AUC])
        self.assertEqual([round(metrics["logloss"], 4)], series[sagemaker_metrics.VALIDATION_LOGLOSS])
        self.assertIn("metric series in its log: train:loss x%d" % lines, out)

    def test_a_users_entry_point_and_split_folders_as_channels_named_as_the_aws_sample_names_them(self):
        # One job for what two tests checked: the channels' names and folders, and a user's entry point and model
        # module from a source directory (what the job does is the library's entry point's either way).
        source_dir = self.create_tempdir().full_path
        # docs/sagemaker.md: examples/custom_model.py copied alone into the source directory.
        shutil.copy(os.path.join(REPO_ROOT, "examples", "custom_model.py"), source_dir)
        with open(os.path.join(source_dir, "train_mine.py"), "w") as f:
            f.write("import custom_model\nimport sagemaker_entry_point\n"
                    "sagemaker_entry_point.main(model_fn=custom_model.model_fn)\n")
        output_dir, out = self.run_job("--channel", "training=%s" % os.path.join(self.data, "train"),
                                       "--channel", "eval=%s" % os.path.join(self.data, "validation"),
                                       "--cpus_per_host", "1", "--source_dir", source_dir,
                                       "--entry_point", "train_mine.py", hyperparameters=WITHOUT_SIZES)
        self.assert_split_channels_trained(output_dir, out)
        self.assertEqual(["metadata.json", "part-00000.libsvm", "part-00000.tfrecord"],
                         sorted(set(os.listdir(os.path.join(output_dir, "algo-1", "input", "data", "eval")))
                                - {check_record.RECORD_FILE})[:3])
        with open(os.path.join(output_dir, "algo-1", "input", "config", "hyperparameters.json")) as f:
            self.assertEqual('"train_mine.py"', json.load(f)["sagemaker_program"])
        with open(os.path.join(output_dir, "checkpoints", "config.json")) as f:
            self.assertEqual("custom_model.model_fn", json.load(f)["model_fn"])

    def test_pipe_mode_training_with_the_metadata_of_a_file_mode_validation_folder(self):
        output_dir, out = self.run_job("--input_mode", "Pipe", "--channel", "train=%s" % self.channels["b"],
                                       "--channel", "validation=%s" % os.path.join(self.data, "validation"),
                                       "--channel_input_mode", "validation=File", "--cpus_per_host", "1",
                                       hyperparameters=WITHOUT_SIZES)
        self.assert_split_channels_trained(output_dir, out)
        with open(os.path.join(output_dir, "algo-1", "input", "config", "inputdataconfig.json")) as f:
            modes = {name: config["TrainingInputMode"] for name, config in json.load(f).items()}
        self.assertEqual({"train": "Pipe", "validation": "File"}, modes)

    def test_an_interpreter_under_tmp_is_refused_at_start(self):
        # A virtual environment under /tmp, which every host replaces with its own.
        venv = tempfile.mkdtemp(prefix="deepfm-venv-", dir="/tmp")
        self.addCleanup(shutil.rmtree, venv)
        os.makedirs(os.path.join(venv, "bin"))
        os.makedirs(os.path.join(venv, "lib", "python%d.%d" % sys.version_info[:2]))
        shutil.copy(os.path.join(sys.prefix, "pyvenv.cfg"), venv)
        os.symlink(os.path.realpath(sys.executable), os.path.join(venv, "bin", "python"))
        os.symlink(sysconfig.get_paths()["purelib"],
                   os.path.join(venv, "lib", "python%d.%d" % sys.version_info[:2], "site-packages"))
        output_dir = os.path.join(self.create_tempdir().full_path, "job")
        proc = command_line.run([os.path.join(venv, "bin", "python"), "-m", "deepfm.sagemaker", "local",
                                 "--output_dir", output_dir, "--channel", "train=%s" % self.data],
                                self.get_temp_dir(), timeout=120)
        self.assertEqual(2, proc.returncode, proc.stderr[-3000:])
        self.assertIn("the interpreter, %s, is under /tmp, which every emulated host replaces with its own"
                      % os.path.join(venv, "bin", "python"), proc.stderr)
        self.assertIn("Install the interpreter or virtual environment outside /tmp", proc.stderr)
        self.assertFalse(os.path.exists(output_dir), "nothing is started or written")

    def test_a_dead_host_process_fails_the_job_naming_the_host(self):
        output_dir = self.create_tempdir().full_path
        process = self.start(output_dir, "--instance_count", "2", "--distribution", "parameter_server",
                             "--channel", "train=%s" % self.data,
                             hyperparameters=HYPERPARAMETERS[:-4] + ("--num_epochs", "1000", "--feature_size",
                                                                     str(FEATURE_SIZE)))
        victim = self.wait_for_training_process(process.pid, "algo-2")
        os.kill(victim, signal.SIGKILL)
        out, err = process.communicate(timeout=JOB_TIMEOUT_S)
        self.assertNotEqual(0, process.returncode, out[-2000:])
        self.assertIn("host algo-2 failed", err)
        self.assertIn(os.path.join(output_dir, "logs", "algo-2.log"), err)
        self.assert_no_leftovers(process.pid)

    def test_hosts_with_too_little_memory_fail_the_job_saying_so(self):
        # 250m: less than a rank with TensorFlow needs, beside the toolkit and sshd; over MPI the job may end on
        # either host's failure, and the report names the host whose cgroup saw the kill.
        try:
            controller = memory.find_controller()
        except memory.MemoryLimitError as e:
            self.skipTest("memory cgroups cannot be made here: %s" % e)
        output_dir = self.create_tempdir().full_path
        process = self.start(output_dir, "--instance_count", "2", "--distribution", "mpi", "--host_memory", "250m",
                             "--channel", "train=%s" % self.channels["b"])
        out, err = process.communicate(timeout=JOB_TIMEOUT_S)
        self.assertNotEqual(0, process.returncode, out[-2000:])
        self.assertRegex(err, r"job \S+ failed: host algo-\d failed \(task algo-\d (was killed for memory|failed with "
                              r"exit code \d+ after a process of host algo-\d was killed for memory)\b.*host algo-\d's "
                              r"processes peaked at \d+ MiB against its limit of 250 MiB \(250m\)"
                              r"( \(\d+ processes killed\))?; raise --host_memory")
        self.assert_no_leftovers(process.pid)
        owned = "%s-%d-" % (memory.CGROUP_PREFIX, process.pid)
        self.assertEqual([], [name for name in os.listdir(controller.parent) if name.startswith(owned)])

    def test_spot_stop_checkpoints_and_a_restarted_job_resumes_from_that_step(self):
        # Also the single-host job that the other tests' jobs are not: its strategy, its hyperparameters file, and
        # a finished job's output directory, which a job without --restart refuses to overwrite (one job for what
        # two tests checked).
        output_dir = self.create_tempdir().full_path
        args = ("--channel", "train=%s" % self.data, "--job_name", "spot-job")
        # The stop lands once the first checkpoint is there, the one saved as the session starts (at step 0 or 1):
        # 40 epochs are its margin before the job would end by itself. No checkpoint is needed along the way (the
        # stop saves its own), so the default interval, 1000 steps, spares the restarted run 30 saves of 50 steps.
        long_run = HYPERPARAMETERS[:-4] + ("--num_epochs", "40", "--feature_size", str(FEATURE_SIZE))
        budget = 40 * (TRAIN_ROWS // BATCH)
        process = self.start(output_dir, *args, hyperparameters=long_run)
        checkpoints = os.path.join(output_dir, "checkpoints")
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not tf.io.gfile.glob(os.path.join(checkpoints, "model.ckpt-*.index")) and process.poll() is None:
            self.assertLess(time.monotonic(), deadline, "no checkpoint appeared")
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)  # SageMaker stopping the job (a spot interruption)
        _, err = process.communicate(timeout=JOB_TIMEOUT_S)
        self.assertEqual(128 + signal.SIGTERM, process.returncode, err[-3000:])
        self.assertIn("stopped by received SIGTERM", err)
        self.assert_no_leftovers(process.pid)
        interrupted = self.metrics(output_dir)
        self.assertTrue(interrupted["interrupted"])
        stopped_at = interrupted["global_step"]
        self.assertLess(stopped_at, budget)
        self.assertEqual(stopped_at, int(tf.train.latest_checkpoint(checkpoints).rsplit("-", 1)[1]))

        again = self.start(output_dir, "--restart", *args, hyperparameters=long_run + ("--verbosity", "0"))
        out, err = again.communicate(timeout=JOB_TIMEOUT_S + 60)
        self.assertEqual(0, again.returncode, err[-3000:])
        self.assertEqual([], ABSL_RECORD.findall(out + err), "raw log records on the console:\n%s" % err[-3000:])
        self.assert_no_leftovers(again.pid)
        finished = self.metrics(output_dir)
        self.assertEqual(budget, finished["global_step"])
        self.assertFalse(finished.get("interrupted"))
        with open(os.path.join(output_dir, "logs", "algo-1.log")) as f:
            self.assertIn("at global step %d" % stopped_at, f.read())
        self.assertIn("single", finished["strategy"])
        self.assertLen(self.exports(output_dir, "algo-1"), 1)
        with open(os.path.join(output_dir, "algo-1", "input", "config", "hyperparameters.json")) as f:
            hyperparameters = json.load(f)
        self.assertEqual('"spot-job"', hyperparameters["sagemaker_job_name"])
        self.assertEqual("40", hyperparameters["num_epochs"])
        refused = command_line.run(command_line.python_module(
            "deepfm.sagemaker", "local", "--output_dir", output_dir, "--channel", "train=%s" % self.data),
            self.get_temp_dir(), timeout=120)
        self.assertEqual(2, refused.returncode, refused.stderr[-3000:])
        self.assertIn("already holds a run of a job (algo-1): pass --restart", refused.stderr)
        self.assertLen(self.exports(output_dir, "algo-1"), 1)

    def wait_for_training_process(self, emulator_pid, host, timeout_s=120):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for namespace in hosts.list_namespaces():
                if namespace.startswith("%s-%d-" % (hosts.NAMESPACE_PREFIX, emulator_pid)) and namespace.endswith(
                        "-" + host):
                    for pid in hosts.namespace_pids(namespace):
                        try:
                            with open("/proc/%d/cmdline" % pid, "rb") as f:
                                argv = f.read().split(b"\0")
                        except OSError:
                            continue
                        # The script's Python process, not the shell the toolkit starts it with.
                        if argv[0] == sys.executable.encode() and argv[1:2] == [b"sagemaker_entry_point.py"]:
                            return pid
            time.sleep(0.5)
        self.fail("no training process appeared on %s within %d s" % (host, timeout_s))


class HostShareTest(tf.test.TestCase):

    def test_a_pipe_mode_channel_of_several_kinds_of_files_is_refused(self):
        data = self.create_tempdir().full_path
        synthetic.generate(300, data, feature_size=FEATURE_SIZE, seed=1, shards=1)
        spec = spec_lib.JobSpec(job_name="pipe", input_mode="Pipe", channels=(
            spec_lib.Channel("train", os.path.join(data, "train")),))
        with self.assertRaisesRegex(ValueError, "Pipe mode streams every file of a channel into its FIFO, as "
                                    "SageMaker does, and this one holds .json, .libsvm, .tfrecord, "
                                    ".tfrecord-packed files"):
            sagemaker_local.LocalConfig(spec=spec, output_dir=self.create_tempdir().full_path)
        self.assertTrue(os.path.isfile(os.path.join(data, "train", schema.METADATA_FILE)))

    def test_sharded_channels_split_files_across_hosts(self):
        files = ["a", "b", "c", "d", "e"]
        self.assertEqual(["a", "c", "e"], sagemaker_local.host_share(files, "ShardedByS3Key", 0, 2))
        self.assertEqual(["b", "d"], sagemaker_local.host_share(files, "ShardedByS3Key", 1, 2))
        self.assertEqual(files, sagemaker_local.host_share(files, "FullyReplicated", 1, 2))
        with self.assertRaisesRegex(ValueError, "1 file\\(s\\) for 2 hosts"):
            sagemaker_local.host_share(["a"], "ShardedByS3Key", 0, 2)


if __name__ == "__main__":
    tf.test.main()
