"""Rendered manifests run with `deepfm.kubernetes local`: real pods on emulated hosts, real training.

Each test renders a tiny job with `deepfm.kubernetes render`, runs one of its
manifests with `deepfm.kubernetes local` (the operator's pod names, DNS,
environment and restart rules; `TF_CONFIG` gRPC clusters or `mpirun` over
ssh between the pods' namespaces), and checks what the job left in the
volume and that nothing was left on the machine. They need root
(namespaces), Open MPI and an ssh server, and skip with the reason otherwise.
"""

import json
import os
import re
import shutil
import signal
import subprocess

import pytest
import yaml

from dataprep import synthetic
from jobs.local import hosts
from tests import command_line

JOB_TIMEOUT_S = 300
FEATURE_SIZE = 500
ROWS = 3_000
SHARDS = 2
BATCH = 128
TRAIN_ROWS = 2_700  # 90% of ROWS; the rest is validation
EPOCHS = 4
# With the default 0.0005, 80 asynchronous steps end anywhere between 0.49 and 0.59 of AUC; with 0.01, 0.68-0.75.
LEARNING_RATE = 0.01
MIN_AUC = 0.6
CHECKPOINT_STEPS = 10
HYPERPARAMETERS = ("--batch_size", str(BATCH), "--learning_rate", str(LEARNING_RATE), "--embedding_size", "4",
                   "--deep_layers", "8", "--dropout", "0", "--num_epochs", str(EPOCHS),
                   "--feature_size", str(FEATURE_SIZE), "--save_checkpoints_steps", str(CHECKPOINT_STEPS),
                   "--log_every_n_steps", "10")
DATA = "data/synthetic"


def missing_requirements():
    reason = hosts.check_privileges()
    if reason:
        return reason
    for tool in ("mpirun", "orted", "ssh-keygen"):
        if shutil.which(tool) is None:
            return "%s is not installed (Debian packages openmpi-bin, openssh-client)" % tool
    if not os.path.exists("/usr/sbin/sshd"):
        return "/usr/sbin/sshd is not installed (Debian package openssh-server)"
    return None


def ps_budget(workers):
    """The global step of asynchronous workers: each runs EPOCHS of its shard's full batches."""
    return workers * EPOCHS * ((TRAIN_ROWS // workers) // BATCH)


def assert_at_ps_budget(global_step, workers):
    """`global_step` ends at the budget: asynchronous workers each stop when they see it reached, so
    up to one step per worker lands after it, and the chief may record one step before the last."""
    budget = ps_budget(workers)
    assert budget - 1 <= global_step <= budget + workers, (global_step, budget, workers)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("kubernetes_data")
    synthetic.generate(ROWS, str(root / "synthetic"), feature_size=FEATURE_SIZE, seed=3, shards=SHARDS)
    return str(root / "synthetic")


@pytest.fixture
def volume(dataset, tmp_path):
    """A fresh claim holding the dataset at `data/synthetic`."""
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    root = tmp_path / "volume"
    shutil.copytree(dataset, str(root / DATA))
    return str(root)


def command(*args):
    return command_line.python_module("deepfm.kubernetes", *args)


def render(tmp_path, name, *args, hyperparameters=HYPERPARAMETERS):
    output = str(tmp_path / ("manifests-" + name))
    argv = command("render", "--job_name", name, "--image", "deepfm:test", "--channel", "train=" + DATA,
                   "--output_dir", output, *args, "--", *hyperparameters)
    result = command_line.run(argv, str(tmp_path), timeout=120)
    assert result.returncode == 0, command_line.describe(argv, result)
    return output


def run_local(tmp_path, manifest, volume, *faults, expect=0):
    """Runs the manifest; checks its exit code and that no namespace, process or mount is left."""
    output = str(tmp_path / ("run-" + os.path.basename(manifest)))
    argv = command("local", "--manifest", manifest, "--volume_dir", volume, "--output_dir", output,
                   "--timeout_s", str(JOB_TIMEOUT_S), *("--fault=" + fault for fault in faults))
    process = command_line.start(argv, str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=JOB_TIMEOUT_S + 60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        leftover = [name for name in hosts.list_namespaces()
                    if name.startswith("%s-%d-" % (hosts.NAMESPACE_PREFIX, process.pid))]
        for name in leftover:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    assert leftover == [], "namespaces left behind"
    assert process.returncode == expect, "stdout:\n%s\nstderr:\n%s" % (out[-3000:], err[-5000:])
    job = manifest_job_name(manifest)
    assert [] == leftover_processes(volume, job), "processes left behind"
    with open("/proc/self/mountinfo") as f:
        assert volume not in f.read(), "a mount of the volume is left"
    return out, err


def manifest_job_name(path):
    with open(path) as f:
        return list(yaml.safe_load_all(f))[-1]["metadata"]["name"]


def leftover_processes(volume, job):
    """Processes of this job: anything naming its volume or its directory in the pods' volume."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    cmdline = f.read().decode(errors="replace")
            except OSError:
                continue
            if volume in cmdline or "/mnt/deepfm/%s/" % job in cmdline:
                found.append((entry, cmdline.replace("\0", " ")))
    return found


def last_run_log(log_dir, pod):
    """The log of the last run of `pod`: `<pod>.log`, `<pod>.<run>.log` for a recreated one, in `restart_<n>/`
    for the job's later attempts."""
    runs = []
    for attempt_dir in [log_dir] + [os.path.join(log_dir, d) for d in os.listdir(log_dir) if d.startswith("restart_")]:
        attempt = int(attempt_dir.rsplit("_", 1)[1]) if attempt_dir != log_dir else 0
        for name in os.listdir(attempt_dir):
            match = re.match(r"^%s(?:\.(\d+))?\.log$" % re.escape(pod), name)
            if match:
                runs.append(((attempt, int(match.group(1) or 0)), os.path.join(attempt_dir, name)))
    assert runs, "no log of pod %s in %s" % (pod, log_dir)
    return max(runs)[1]


def job_outputs(volume, name):
    with open(os.path.join(volume, name, "metrics.json")) as f:
        metrics = json.load(f)
    export = os.path.join(volume, name, "export")
    exports = [d for d in os.listdir(export) if os.path.exists(os.path.join(export, d, "saved_model.pb"))]
    return metrics, exports


@pytest.mark.slow
class TestTFJob:
    """TFJobs of parameter servers under faults.

    A killed pod recreated, in a job of two workers and a parameter server that
    ends at its budget with a model that learned, and a lost worker's job
    going on with one pod (elastic), are docs/kubernetes.md's rehearsal
    (`KubernetesTest` in tests/test_docs_commands.py): it loses a worker's
    node, goes on with one training pod, grows back to two when the node
    returns and recreates the chief's pod after a kill. A job that ends on the
    workers left, at their budget, is `ElasticLaunchTest` of
    tests/jobs/local/test_launcher.py (the same `jobs.elastic` decides both).
    """

    def test_without_elasticity_a_lost_worker_fails_the_job(self, tmp_path, volume):
        manifests = render(tmp_path, "ps-rigid", "--instance_count", "2", "--distribution", "parameter_server")
        _, err = run_local(tmp_path, os.path.join(manifests, "tfjob.yaml"), volume,
                           "lose:ps-rigid-worker-0@%d" % CHECKPOINT_STEPS, expect=1)
        assert "fewer than the minimum 2" in err

    def test_a_user_error_is_permanent(self, tmp_path, volume):
        # One instance: a chief and a parameter server, each failing on the flag (a worker would fail as they do).
        manifests = render(tmp_path, "ps-typo", "--instance_count", "1", "--distribution", "parameter_server",
                           hyperparameters=HYPERPARAMETERS + ("--no_such_flag", "1"))
        out, err = run_local(tmp_path, os.path.join(manifests, "tfjob.yaml"), volume, expect=1)
        assert "exited with code 1: failed (permanent)" in out
        assert "Unknown command line flag 'no_such_flag'" in err
        assert "restart" not in out


@pytest.mark.slow
class TestMPIJob:

    def test_two_workers_and_a_killed_worker_fails_mpirun_and_the_launcher_job_retries(self, tmp_path, volume):
        # One job for what two tests checked: the pods of an MPIJob of two workers, rank 1 on the other worker,
        # and a worker killed after the first checkpoint, the launcher recreated, the job ending at its budget.
        manifests = render(tmp_path, "mpi-kill", "--instance_count", "2", "--distribution", "mpi")
        out, _ = run_local(tmp_path, os.path.join(manifests, "mpijob.yaml"), volume,
                           "kill:mpi-kill-worker-1@%d" % CHECKPOINT_STEPS)
        assert "started mpi-kill-worker-0, mpi-kill-worker-1, mpi-kill-launcher" in out
        assert "pod mpi-kill-worker-1 exited with code 137: restart the container" in out
        assert re.search(r"pod mpi-kill-launcher exited with code \d+: recreate the pod", out), out
        assert "completed after 1 restart(s)" in out
        metrics, exports = job_outputs(volume, "mpi-kill")
        assert "rank 0 of 2" in metrics["strategy"]
        # Synchronous ranks: each runs EPOCHS of its shard's full batches.
        assert metrics["global_step"] == EPOCHS * ((TRAIN_ROWS // 2) // BATCH)
        assert metrics["auc"] > MIN_AUC, metrics
        assert len(exports) == 1
        # The launcher that finished the job: its log holds rank 1's lines (rank 1 ran on the other worker).
        launcher = last_run_log(os.path.join(tmp_path, "run-mpijob.yaml", "logs"), "mpi-kill-launcher")
        with open(launcher) as f:
            log = f.read()
        assert "[1,1]<stdout>" in log or "[1,1]<stderr>" in log, launcher


@pytest.mark.slow
class TestJobSet:

    def test_parameter_servers(self, tmp_path, volume):
        manifests = render(tmp_path, "js", "--instance_count", "2", "--distribution", "parameter_server")
        out, _ = run_local(tmp_path, os.path.join(manifests, "jobset.yaml"), volume)
        assert "started js-chief-0-0, js-worker-0-0, js-ps-0-0 (2 training pod(s))" in out
        metrics, exports = job_outputs(volume, "js")
        assert "1 parameter server(s), 2 worker(s)" in metrics["strategy"]
        assert_at_ps_budget(metrics["global_step"], 2)
        assert metrics["auc"] > MIN_AUC, metrics
        assert len(exports) == 1


@pytest.mark.slow
class TestMemory:

    def test_a_pod_over_its_containers_memory_limit_is_reported_oomkilled(self, tmp_path, volume):
        # 200Mi: less than one TensorFlow process needs; the kubelet's limit is the container's.
        manifests = render(tmp_path, "oom", "--instance_count", "1", "--distribution", "parameter_server",
                           "--memory", "200Mi", "--backoff_limit", "0")
        out, err = run_local(tmp_path, os.path.join(manifests, "tfjob.yaml"), volume, expect=137)
        assert re.search(r"pod oom-\S+ exited with code 137 \(OOMKilled: host oom-\S+'s processes peaked at \d+ MiB "
                         r"against its limit of 200 MiB \(resources.limits.memory 200Mi\)( \(\d+ processes killed\))?; "
                         r"raise the container's "
                         r"resources.limits.memory", out), out
        assert re.search(r"the job failed: pod oom-\S+ failed with exit code 137 \(OOMKilled: .*\) after 0 "
                         r"restart\(s\), the backoff limit", err), err
