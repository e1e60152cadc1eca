"""Tests of `strategies.strategy_names`: every strategy declares how it is launched, and the launchers' choices of
strategy are those of the declarations."""

import tempfile
import unittest

import strategies
from deepfm import launch
from jobs import spec as spec_lib
from jobs.kubernetes import job as kubernetes_job
from jobs.local import launcher
from jobs.sagemaker import env
from strategies import strategy_names as names
from tests import command_line, paths

# `python -m deepfm.launch --help` imports no TensorFlow.
HELP_TIMEOUT_S = 60


class DeclarationsTest(unittest.TestCase):

    def test_every_registered_strategy_declares_its_launch(self):
        self.assertEqual(strategies.names(), sorted(names.LAUNCHES))
        self.assertEqual(names.ALL, tuple(names.LAUNCHES))
        for name in names.ALL:
            launch_of = names.launch_of(name)
            self.assertEqual(name, launch_of.name)
            self.assertIn(launch_of.kind, names.KINDS)
            self.assertIn(launch_of.distribution, names.DISTRIBUTIONS)
            self.assertEqual(launch_of.kind == names.TF_CLUSTER, launch_of.parameter_servers)

    def test_each_distribution_has_one_default(self):
        self.assertEqual({"none": names.SINGLE, "parameter_server": names.PS, "mpi": names.HOROVOD},
                         {d: names.default_of(d) for d in names.DISTRIBUTIONS})
        self.assertEqual({"none": (), "parameter_server": (), "mpi": (names.HOROVOD, names.HYBRID)},
                         {d: names.choices_of(d) for d in names.DISTRIBUTIONS})

    def test_the_kinds_name_their_strategies(self):
        self.assertEqual((names.PS, names.HOROVOD, names.HYBRID), names.MULTI_PROCESS)
        self.assertEqual((names.HOROVOD, names.HYBRID), names.HOROVOD_RANKS)

    def test_an_unknown_name_is_refused_with_the_known_ones(self):
        with self.assertRaisesRegex(ValueError, "strategy must be one of single, .*, auto, got 'nccl'"):
            names.launch_of("nccl")
        with self.assertRaisesRegex(ValueError, "distribution must be one of none, parameter_server, mpi, got 'x'"):
            names.default_of("x")


class LauncherChoicesTest(unittest.TestCase):

    def test_the_local_launcher_starts_the_multi_process_strategies(self):
        for name in names.ALL:
            with self.subTest(name):
                if names.launch_of(name).multi_process:
                    config = launcher.LaunchConfig(strategy=name, log_dir="/logs")
                    self.assertEqual(names.launch_of(name).workers_flag, config.workers_flag)
                else:
                    with self.assertRaisesRegex(ValueError, "--strategy must be one of ps, horovod, hybrid"):
                        launcher.LaunchConfig(strategy=name, log_dir="/logs")

    def test_deepfm_launch_offers_the_multi_process_strategies(self):
        command = command_line.python_module(launch.PROGRAM, "--help")
        result = command_line.run(command, paths.REPO_ROOT, timeout=HELP_TIMEOUT_S)
        self.assertEqual(0, result.returncode, command_line.describe(command, result))
        self.assertIn("--strategy: <%s>: Distributed strategy to launch.\n    (default: '%s')"
                      % ("|".join(names.MULTI_PROCESS), launcher.DEFAULT_STRATEGY), result.stdout)

    def test_kubernetes_jobs_run_their_distributions_strategies(self):
        for distribution in names.DISTRIBUTIONS:
            with self.subTest(distribution):
                job = kubernetes_job.KubernetesJob(spec=spec_lib.JobSpec(job_name="j", distribution=distribution),
                                              image="i")
                self.assertIn("--strategy=%s" % names.default_of(distribution), job.train_args())
                for name in names.ALL:
                    spec = spec_lib.JobSpec(job_name="j", distribution=distribution,
                                            hyperparameters={"strategy": name})
                    if name in names.choices_of(distribution):
                        kubernetes_job.KubernetesJob(spec=spec, image="i")
                    else:
                        with self.assertRaisesRegex(ValueError, "hyperparameter --strategy %s" % name):
                            kubernetes_job.KubernetesJob(spec=spec, image="i")

    def test_sagemaker_jobs_run_their_distributions_defaults(self):
        with tempfile.TemporaryDirectory() as base_dir:
            mpi = {"SM_FRAMEWORK_PARAMS": '{"%s": true}' % env.MPI_ENABLED, env.BASE_DIR_VARIABLE: base_dir}
            self.assertIn("--strategy=%s" % names.default_of(names.DISTRIBUTION_MPI), env.training_args(mpi, []))


if __name__ == "__main__":
    unittest.main()
