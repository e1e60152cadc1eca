"""The module paths of earlier releases still work and warn, naming the new path (CHANGELOG.md lists them)."""

import importlib
import subprocess
import sys
import unittest
import warnings

from absl.testing import parameterized

from tests import command_line, paths

# Old path -> (the new module holding one of its public names, that name).
MOVED = {
    "jobs.sagemaker_env": ("jobs.sagemaker.env", "training_args"),
    "jobs.sagemaker_local": ("jobs.sagemaker.local", "LocalConfig"),
    "jobs.sagemaker_metrics": ("jobs.sagemaker.metrics", "METRIC_DEFINITIONS"),
    "jobs.sagemaker_processing": ("jobs.sagemaker.processing", "ConversionConfig"),
    "jobs.sagemaker_submit": ("jobs.sagemaker.submit", "SubmitConfig"),
    "jobs.kubernetes_entry": ("jobs.kubernetes.entry", "pod_exit_code"),
    "jobs.kubernetes_manifests": ("jobs.kubernetes.manifests", "KubernetesJob"),
    "jobs.kubernetes_local": ("jobs.kubernetes.local.run", "LocalConfig"),
    "jobs.processes": ("jobs.local.processes", "ProcessGroup"),
    "jobs.hosts": ("jobs.local.hosts", "HostNetwork"),
    "jobs.host_init": ("jobs.local.host_init", "main"),
}
# Names of the split modules, each from the module that holds it now.
SPLIT = (
    ("jobs.sagemaker_job", "jobs.spec", "Channel"),
    ("jobs.sagemaker_job", "jobs.sagemaker.container", "encoded_hyperparameters"),
    ("jobs.sagemaker_job", "jobs.source", "write_source_tarball"),
    ("jobs.sagemaker_processing", "jobs.sagemaker.processing_job", "run_job"),
    ("jobs.kubernetes_local", "jobs.kubernetes.local.faults", "Fault"),
    ("jobs.kubernetes_local", "jobs.kubernetes.local.tfjob", "TFJobOperator"),
    ("jobs.kubernetes_local", "jobs.kubernetes.local.jobset", "JobSetOperator"),
)
TIMEOUT_S = 120


def import_fresh(name: str):
    """Imports `name` anew with an import statement of this file (a cached alias warns only once).

    Returns:
      The module and the DeprecationWarnings its import gave.
    """
    sys.modules.pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile("import %s" % name, __file__, "exec"), {})  # pylint: disable=exec-used
    return sys.modules[name], [w for w in caught if issubclass(w.category, DeprecationWarning)]


def run_module(*args: str) -> subprocess.CompletedProcess:
    """`python -m ARGS` as a user starts it (`tests.command_line`), from the checkout."""
    return command_line.run(command_line.python_module(*args), paths.REPO_ROOT, timeout=TIMEOUT_S)


class AliasTest(parameterized.TestCase):

    @parameterized.parameters(*sorted(MOVED.items()))
    def test_an_old_path_warns_naming_the_new_one_and_reads_its_names(self, old, new_and_name):
        new, name = new_and_name
        module, caught = import_fresh(old)
        self.assertLen(caught, 1)
        self.assertIn("%s moved to %s" % (old, new.rsplit(".run", 1)[0]), str(caught[0].message))
        self.assertEqual(__file__, caught[0].filename)
        self.assertIs(getattr(importlib.import_module(new), name), getattr(module, name))

    @parameterized.parameters(*SPLIT)
    def test_a_split_module_reads_each_name_where_it_went(self, old, new, name):
        module, caught = import_fresh(old)
        self.assertLen(caught, 1)
        self.assertIn(new, str(caught[0].message))
        self.assertIs(getattr(importlib.import_module(new), name), getattr(module, name))
        self.assertRaisesRegex(AttributeError, "no attribute 'no_such_name'", getattr, module, "no_such_name")

    def test_the_old_job_spec_keeps_its_two_sagemaker_methods(self):
        module, _ = import_fresh("jobs.sagemaker_job")
        from jobs.sagemaker import container, submit
        spec = module.JobSpec(job_name="old", distribution="mpi", processes_per_host=2)
        self.assertEqual(container.distribution_hyperparameters(spec), spec.distribution_hyperparameters())
        self.assertEqual(submit.sdk_distribution(spec), spec.sdk_distribution())
        self.assertEqual(2, spec.sdk_distribution()["mpi"]["processes_per_host"])

    def test_the_launchers_old_module_names_resolve_with_a_warning(self):
        import jobs.local
        from jobs.local import launcher
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.assertIs(launcher.launch, jobs.local.launch)
            self.assertIs(launcher.LaunchConfig, jobs.local.LaunchConfig)
        self.assertEqual(["jobs.local.launch moved to jobs.local.launcher.launch",
                          "jobs.local.LaunchConfig moved to jobs.local.launcher.LaunchConfig"],
                         [str(w.message).split(";")[0] for w in caught])
        self.assertRaises(AttributeError, getattr, jobs.local, "no_such_name")


class OldCommandTest(unittest.TestCase):

    def test_the_old_processing_command_runs_the_new_one_and_warns(self):
        old = run_module("jobs.sagemaker_processing", "bogus")
        new = run_module("jobs.sagemaker.processing", "bogus")
        self.assertEqual(new.returncode, old.returncode)
        self.assertNotEqual(0, old.returncode)
        self.assertIn("expected one command", old.stderr)
        self.assertIn("DeprecationWarning: python -m jobs.sagemaker_processing moved to python -m "
                      "jobs.sagemaker.processing", old.stderr)
        self.assertNotIn("DeprecationWarning", new.stderr)

    def test_the_old_kubernetes_entry_runs_its_command(self):
        result = run_module("jobs.kubernetes_entry", "--", sys.executable, "-c", "import sys; sys.exit(3)")
        self.assertEqual(3, result.returncode, result.stderr)
        self.assertIn("python -m jobs.kubernetes.entry", result.stderr)


if __name__ == "__main__":
    unittest.main()
