"""The rendered manifests, validated offline against the official schemas and models.

Built-in kinds (PersistentVolumeClaim, Service, ConfigMap, the Jobs of a
JobSet, the pod templates of a TFJob's or MPIJob's replicas) go through
`kubernetes-validate --strict` (the Kubernetes OpenAPI schemas it ships;
unknown fields are errors). The operator kinds are validated strictly against
their official client models (`tests/jobs/kubernetes/operator_models.py`): the Kubeflow
training SDK's for TFJob and MPIJob, the Kubeflow Trainer API's for JobSet.
"""

import configparser
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

from jobs import source as source_lib
from jobs import spec as spec_lib
from jobs.kubernetes import entry as kubernetes_entry
from jobs.kubernetes import job as kubernetes_job
from jobs.kubernetes import manifests
from tests import command_line, paths
from tests.jobs.kubernetes import operator_models

API_VERSIONS = {manifests.TFJOB: manifests.TFJOB_API_VERSION, manifests.MPIJOB: manifests.MPIJOB_API_VERSION,
                manifests.JOBSET: manifests.JOBSET_API_VERSION}
REPLICA_SPECS = {manifests.TFJOB: "tfReplicaSpecs", manifests.MPIJOB: "mpiReplicaSpecs"}
KUBERNETES_VERSION = "1.35.0"
KUBERNETES_VALIDATE = os.path.join(os.path.dirname(sys.executable), "kubernetes-validate")


def nested_builtin(document):
    """The built-in kinds inside an operator-kind document, as documents of their own.

    A TFJob's or MPIJob's replica templates as `v1` PodTemplates; each
    replicated job of a JobSet as the `batch/v1` Job it creates.
    """
    name = document["metadata"]["name"]
    if document["kind"] in REPLICA_SPECS:
        return [{"apiVersion": "v1", "kind": "PodTemplate",
                 "metadata": {"name": "%s-%s" % (name, replica_type.lower())}, "template": spec["template"]}
                for replica_type, spec in document["spec"][REPLICA_SPECS[document["kind"]]].items()]
    return [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "%s-%s-0" % (name, replicated["name"])},
             "spec": replicated["template"]["spec"]} for replicated in document["spec"]["replicatedJobs"]]


def kubernetes_validate(documents):
    """Runs `kubernetes-validate --strict` on built-in documents; returns (exit code, output)."""
    with tempfile.TemporaryDirectory() as directory:
        paths = []
        for index, document in enumerate(documents):
            path = os.path.join(directory, "%d-%s.yaml" % (index, document["kind"].lower()))
            with open(path, "w") as f:
                yaml.safe_dump(document, f)
            paths.append(path)
        result = subprocess.run([KUBERNETES_VALIDATE, "--strict", "-k", KUBERNETES_VERSION, "--quiet"] + paths,
                                capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def job_of(distribution, instance_count, **kwargs):
    hyperparameters = kwargs.pop("hyperparameters", {"num_epochs": 1, "batch_norm": True})
    spec = spec_lib.JobSpec(
        job_name=kwargs.pop("job_name", "deepfm-test"), instance_count=instance_count, distribution=distribution,
        processes_per_host=kwargs.pop("processes_per_host", 1),
        channels=(spec_lib.Channel("train", "data/synthetic"),
                  spec_lib.Channel("validation", "data/synthetic/validation")),
        hyperparameters=hyperparameters)
    return kubernetes_job.KubernetesJob(spec=spec, image="registry.example/deepfm:1", **kwargs)


VARIANTS = {
    "ps, one worker": lambda: job_of(spec_lib.DISTRIBUTION_PS, 1),
    "ps, three workers, elastic, metrics, requests": lambda: job_of(
        spec_lib.DISTRIBUTION_PS, 3, num_ps=2, min_replicas=1, max_replicas=4, metrics_port=9090,
        resources=kubernetes_job.Resources(cpu="4", memory="8Gi", gpus=1), storage_class="fsx-lustre"),
    "mpi, one worker": lambda: job_of(spec_lib.DISTRIBUTION_MPI, 1, pvc="shared"),
    "mpi, three workers of two slots, elastic, metrics": lambda: job_of(
        spec_lib.DISTRIBUTION_MPI, 3, processes_per_host=2, min_replicas=2, metrics_port=9090,
        resources=kubernetes_job.Resources(cpu="500m")),
    "one process": lambda: job_of(spec_lib.DISTRIBUTION_NONE, 1),
}


class RenderedKindsAreValidTest(unittest.TestCase):
    """Every rendered document passes its schema, for ps and MPI, one and several workers."""

    def test_every_document_validates(self):
        for variant, make in VARIANTS.items():
            with self.subTest(variant):
                files = manifests.render(make())
                documents = [document for docs in files.values() for document in docs]
                builtin = [d for d in documents if d["kind"] not in operator_models.KIND_MODELS]
                operator = [d for d in documents if d["kind"] in operator_models.KIND_MODELS]
                self.assertEqual(2, len(operator))
                for document in operator:
                    self.assertEqual(API_VERSIONS[document["kind"]], document["apiVersion"])
                    self.assertEqual([], operator_models.errors(document), document["kind"])
                    builtin.extend(nested_builtin(document))
                code, output = kubernetes_validate(builtin)
                self.assertEqual(0, code, output)

    def test_the_files_of_each_distribution(self):
        self.assertEqual(["pvc.yaml", "tfjob.yaml", "jobset.yaml"],
                         list(manifests.render(VARIANTS["ps, one worker"]())))
        self.assertEqual(["mpijob.yaml", "jobset.yaml"], list(manifests.render(VARIANTS["mpi, one worker"]())))

    def test_the_checks_reject_what_an_api_server_would(self):
        files = manifests.render(VARIANTS["ps, one worker"]())
        tfjob = files["tfjob.yaml"][0]
        unknown = copy.deepcopy(tfjob)
        unknown["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
        self.assertTrue(any("containers[0].imagePullPolice: unknown field" in error
                            for error in operator_models.errors(unknown)))
        code, output = kubernetes_validate(nested_builtin(unknown))
        self.assertNotEqual(0, code)
        self.assertIn("imagePullPolice", output)
        wrong_type = copy.deepcopy(tfjob)
        wrong_type["spec"]["runPolicy"]["backoffLimit"] = "three"
        self.assertEqual(["spec.runPolicy.backoffLimit: expected int, got 'three'"],
                         operator_models.errors(wrong_type))
        missing = copy.deepcopy(tfjob)
        del missing["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["name"]
        self.assertTrue(any("`name`" in error for error in operator_models.errors(missing)))

        jobset = files["jobset.yaml"][-1]
        unknown = copy.deepcopy(jobset)
        unknown["spec"]["failurePolicey"] = unknown["spec"].pop("failurePolicy")
        self.assertTrue(any("spec.failurePolicey: unknown field" in error
                            for error in operator_models.errors(unknown)))
        unknown_nested = copy.deepcopy(jobset)
        unknown_nested["spec"]["replicatedJobs"][0]["template"]["spec"]["backofLimit"] = 0
        self.assertTrue(any("template.spec.backofLimit: unknown field" in error
                            for error in operator_models.errors(unknown_nested)))
        wrong_type = copy.deepcopy(jobset)
        wrong_type["spec"]["failurePolicy"]["maxRestarts"] = "3"
        self.assertTrue(any("maxRestarts" in error for error in operator_models.errors(wrong_type)))
        missing = copy.deepcopy(jobset)
        del missing["spec"]["replicatedJobs"][0]["name"]
        self.assertIn("spec.replicatedJobs[0]: required field 'name' of JobsetV1alpha2ReplicatedJob is missing",
                      operator_models.errors(missing))

        bad = copy.deepcopy(files["pvc.yaml"][0])
        bad["spec"]["accessMode"] = ["ReadWriteMany"]
        code, output = kubernetes_validate([bad])
        self.assertNotEqual(0, code)
        self.assertIn("accessMode", output)


class TFJobTest(unittest.TestCase):

    def setUp(self):
        self.job = VARIANTS["ps, three workers, elastic, metrics, requests"]()
        self.tfjob = manifests.tfjob(self.job)

    def test_replicas_as_the_operator_names_them(self):
        specs = self.tfjob["spec"]["tfReplicaSpecs"]
        self.assertEqual({"Chief": 1, "Worker": 2, "PS": 2}, {k: v["replicas"] for k, v in specs.items()})
        for spec in specs.values():
            self.assertEqual(manifests.RESTART_EXIT_CODE, spec["restartPolicy"])
            container = spec["template"]["spec"]["containers"][0]
            self.assertEqual(manifests.TF_CONTAINER, container["name"])
            self.assertEqual([{"containerPort": 2222, "name": "tfjob-port"}], container["ports"])
        self.assertEqual(3, self.tfjob["spec"]["runPolicy"]["backoffLimit"])
        # Gang scheduling waits for the elastic minimum: 1 training pod and the 2 ps.
        self.assertEqual(3, self.tfjob["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"])
        self.assertEqual({"deepfm/min-replicas": "1", "deepfm/max-replicas": "4"},
                         self.tfjob["metadata"]["annotations"])

    def test_the_training_command(self):
        container = self.tfjob["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
        self.assertEqual(["python", "-m", "jobs.kubernetes.entry", "--"], container["command"])
        args = container["args"]
        self.assertEqual(["python", "-m", "deepfm.train"], args[:3])
        for flag in ("--strategy=ps", "--train_data=/mnt/deepfm/data/synthetic",
                     "--val_data=/mnt/deepfm/data/synthetic/validation", "--model_dir=/mnt/deepfm/deepfm-test/model",
                     "--export_dir=/mnt/deepfm/deepfm-test/export",
                     "--metrics_file=/mnt/deepfm/deepfm-test/metrics.json", "--metrics_port=9090",
                     "--intra_op_threads=4", "--num_epochs=1", "--batch_norm=true"):
            self.assertIn(flag, args)
        self.assertEqual({"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}, container["resources"]["limits"])

    def test_only_the_chief_is_scraped(self):
        specs = self.tfjob["spec"]["tfReplicaSpecs"]
        self.assertEqual({"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                          "prometheus.io/path": "/metrics"}, specs["Chief"]["template"]["metadata"]["annotations"])
        self.assertNotIn("annotations", specs["Worker"]["template"]["metadata"])

    def test_hyperparameters_win(self):
        job = job_of(spec_lib.DISTRIBUTION_PS, 1, hyperparameters={"model_dir": "/mnt/deepfm/elsewhere"})
        self.assertIn("--model_dir=/mnt/deepfm/elsewhere", job.train_args())
        self.assertNotIn("--model_dir=/mnt/deepfm/deepfm-test/model", job.train_args())


class MPIJobTest(unittest.TestCase):

    def test_launcher_and_sshd_workers(self):
        mpijob = manifests.mpijob(VARIANTS["mpi, three workers of two slots, elastic, metrics"]())
        self.assertEqual(2, mpijob["spec"]["slotsPerWorker"])
        specs = mpijob["spec"]["mpiReplicaSpecs"]
        self.assertEqual(1, specs["Launcher"]["replicas"])
        self.assertEqual(3, specs["Worker"]["replicas"])
        worker = specs["Worker"]["template"]["spec"]["containers"][0]
        self.assertEqual(["/usr/sbin/sshd", "-De"], worker["command"])
        launcher = specs["Launcher"]["template"]["spec"]["containers"][0]
        self.assertEqual("mpirun", launcher["args"][0])
        self.assertNotIn("-np", launcher["args"])  # every slot of the operator's hostfile runs a rank
        # A waiting rank yields its core (jobs.spec.MPI_YIELD_OPTIONS), before the user's options.
        self.assertIn("-mca mpi_yield_when_idle 1", " ".join(launcher["args"]))
        self.assertIn("--strategy=horovod", launcher["args"])
        self.assertIn("prometheus.io/scrape", specs["Worker"]["template"]["metadata"]["annotations"])
        # The SDK's MPIJob model (validated against) is v1's: of its fields, v2beta1 moved or dropped these.
        self.assertFalse({"cleanPodPolicy", "mainContainer"} & set(mpijob["spec"]))

    def test_an_mpi_job_runs_the_hybrid_strategy_when_asked(self):
        mpijob = manifests.mpijob(job_of("mpi", 2, hyperparameters={"strategy": "hybrid"}))
        launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        self.assertIn("--strategy=hybrid", launcher["args"])
        self.assertNotIn("--strategy=horovod", launcher["args"])


class JobSetTest(unittest.TestCase):

    def test_parameter_servers(self):
        documents = manifests.jobset(VARIANTS["ps, three workers, elastic, metrics, requests"]())
        service, jobset = documents
        self.assertEqual("None", service["spec"]["clusterIP"])
        self.assertEqual({"jobset.sigs.k8s.io/jobset-name": "deepfm-test"}, service["spec"]["selector"])
        spec = jobset["spec"]
        self.assertEqual("deepfm-test", spec["network"]["subdomain"])
        self.assertEqual(["chief", "worker", "ps"], [r["name"] for r in spec["replicatedJobs"]])
        worker = spec["replicatedJobs"][1]["template"]["spec"]
        self.assertEqual((2, 2, "Indexed", 0), (worker["completions"], worker["parallelism"],
                                                worker["completionMode"], worker["backoffLimit"]))
        env = {e["name"]: e for e in worker["template"]["spec"]["containers"][0]["env"]}
        self.assertEqual({"chief": ["deepfm-test-chief-0-0.deepfm-test:2222"],
                          "worker": ["deepfm-test-worker-0-0.deepfm-test:2222",
                                     "deepfm-test-worker-0-1.deepfm-test:2222"],
                          "ps": ["deepfm-test-ps-0-0.deepfm-test:2222", "deepfm-test-ps-0-1.deepfm-test:2222"]},
                         json.loads(env[kubernetes_entry.CLUSTER_VARIABLE]["value"]))
        self.assertEqual("metadata.labels['jobset.sigs.k8s.io/replicatedjob-name']",
                         env[kubernetes_entry.TASK_TYPE_VARIABLE]["valueFrom"]["fieldRef"]["fieldPath"])
        rule = worker["podFailurePolicy"]["rules"][0]
        self.assertEqual("FailJob", rule["action"])
        self.assertEqual(("NotIn", list(kubernetes_entry.RETRYABLE_POD_EXIT_CODES)),
                         (rule["onExitCodes"]["operator"], rule["onExitCodes"]["values"]))
        self.assertEqual({"maxRestarts": 3, "rules": [{"name": "permanent-failure", "action": "FailJobSet",
                                                       "onJobFailureReasons": ["PodFailurePolicy"]}]},
                         spec["failurePolicy"])
        self.assertEqual({"operator": "All", "targetReplicatedJobs": ["chief"]}, spec["successPolicy"])

    def test_mpi(self):
        service, config_map, jobset = manifests.jobset(VARIANTS["mpi, three workers of two slots, elastic, metrics"]())
        del service
        self.assertEqual("deepfm-test-worker-0-0.deepfm-test slots=2\ndeepfm-test-worker-0-1.deepfm-test slots=2\n"
                         "deepfm-test-worker-0-2.deepfm-test slots=2\n", config_map["data"]["hostfile"])
        spec = jobset["spec"]
        self.assertEqual(["worker", "launcher"], [r["name"] for r in spec["replicatedJobs"]])
        self.assertEqual({"startupPolicyOrder": "InOrder"}, spec["startupPolicy"])
        launcher = spec["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
        env = {e["name"]: e.get("value") for e in launcher["containers"][0]["env"]}
        self.assertEqual("/etc/mpi/hostfile", env["OMPI_MCA_orte_default_hostfile"])
        self.assertEqual({"deepfm-test-mpi", None}, {v.get("configMap", {}).get("name") for v in launcher["volumes"]})


class BadInputTest(unittest.TestCase):

    def test_errors_name_the_flag(self):
        for make, message in (
                (lambda: job_of("parameter_server", 2, job_name="Deepfm_X"), "--job_name"),
                (lambda: kubernetes_job.KubernetesJob(spec=spec_lib.JobSpec(job_name="j"), image=""), "--image"),
                (lambda: job_of("parameter_server", 2, min_replicas=3), "--min_replicas"),
                (lambda: job_of("parameter_server", 2, pvc="claim", storage_class="efs"), "--pvc"),
                (lambda: job_of("parameter_server", 2, metrics_port=70000), "--metrics_port"),
                (lambda: kubernetes_job.Resources(cpu="lots"), "--cpu"),
                (lambda: job_of("parameter_server", 2, hyperparameters={"strategy": "single"}),
                 "hyperparameter --strategy")):
            with self.subTest(message):
                with self.assertRaisesRegex(ValueError, message):
                    make()

    def test_the_base_image_is_the_sdks(self):
        from sagemaker import image_uris  # the SageMaker Python SDK (a development requirement)
        for instance_type, make in (("ml.c5.xlarge", VARIANTS["ps, one worker"]),
                                    ("ml.p3.2xlarge", VARIANTS["ps, three workers, elastic, metrics, requests"])):
            uri = image_uris.retrieve("tensorflow", "us-east-1", version="2.14.1", instance_type=instance_type,
                                      image_scope="training", py_version="py310")
            self.assertIn("ARG BASE_IMAGE=%s\n" % uri, manifests.dockerfile(make()))

    def test_channels_live_in_the_volume(self):
        spec = spec_lib.JobSpec(job_name="deepfm-test", channels=(spec_lib.Channel("train", "/data/x"),))
        with self.assertRaisesRegex(ValueError, "inside the volume"):
            kubernetes_job.KubernetesJob(spec=spec, image="i")

    def test_nothing_is_overwritten(self):
        with tempfile.TemporaryDirectory() as directory:
            paths = manifests.write(VARIANTS["ps, one worker"](), directory)
            self.assertEqual(["pvc.yaml", "tfjob.yaml", "jobset.yaml", "Dockerfile"],
                             [os.path.basename(p) for p in paths])
            with open(os.path.join(directory, "Dockerfile")) as f:
                self.assertIn("tensorflow-training:2.14.1-cpu-py310\n", f.read())
            with self.assertRaisesRegex(FileExistsError, "pvc.yaml"):
                manifests.write(VARIANTS["ps, one worker"](), directory)


# Takes the project's editable install out of the import system, so only the files beside the
# interpreter's working directory (the image's copy) can be imported, as in the image.
IMAGE_IMPORT_PROBE = """\
import os, sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith("__editable__")]
sys.path_importer_cache.clear()
import deepfm.train, jobs.kubernetes.entry
projects = %r
outside = sorted(name for name, module in sys.modules.items()
                 if name.split(".")[0] in projects and getattr(module, "__file__", None)
                 and not os.path.abspath(module.__file__).startswith(os.getcwd() + os.sep))
print("imported from outside the image:", outside)
sys.exit(1 if outside else 0)
"""


def setup_cfg_packages():
    """The top-level packages setup.cfg installs (`[options.packages.find] include`)."""
    parser = configparser.ConfigParser()
    parser.read(os.path.join(paths.REPO_ROOT, "setup.cfg"))
    include = parser["options.packages.find"]["include"].split()
    return {name for name in include if "." not in name}


def dockerfile_copies(text):
    """The sources of the Dockerfile's COPY instructions, in order."""
    sources = []
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == "COPY":
            sources += words[1:-1]
    return sources


class ImageTest(unittest.TestCase):
    """The image the rendered Dockerfile builds holds every package training needs."""

    def test_one_list_of_packages_for_setup_cfg_the_source_tarball_and_the_image(self):
        self.assertEqual(setup_cfg_packages(), set(source_lib.SOURCE_PACKAGES))
        shipped = {name.split("/")[0] for name, _ in source_lib.source_files()} - {spec_lib.ENTRY_POINT}
        self.assertEqual(shipped, set(source_lib.SOURCE_PACKAGES))
        copies = dockerfile_copies(manifests.dockerfile(VARIANTS["ps, one worker"]()))
        self.assertEqual(list(manifests.PROJECT_FILES) + list(source_lib.SOURCE_PACKAGES), copies)

    def test_the_build_command_names_the_dockerfile_from_the_project_root(self):
        root = paths.REPO_ROOT
        self.assertEqual("k8s/ctr-ps/Dockerfile", manifests.build_path(os.path.join(root, "k8s", "ctr-ps"), root))
        outside = tempfile.gettempdir()
        self.assertEqual(os.path.join(outside, "ctr-ps", "Dockerfile"),
                         manifests.build_path(os.path.join(outside, "ctr-ps"), root))

    def test_the_images_files_import_the_training_entry_point(self):
        with tempfile.TemporaryDirectory() as work:
            rendered = command_line.run(command_line.python_module(
                "deepfm.kubernetes", "render", "--job_name", "ctr-ps", "--instance_count", "2",
                "--distribution", "parameter_server", "--num_ps", "1", "--channel", "train=data/synthetic",
                "--image", "deepfm:test", "--output_dir", "k8s/ctr-ps"), work, timeout=120)
            self.assertEqual(0, rendered.returncode, command_line.describe("render", rendered))
            with open(os.path.join(work, "k8s", "ctr-ps", "Dockerfile")) as f:
                text = f.read()
            self.assertIn("docker build -f %s -t deepfm:test ." % os.path.join(work, "k8s", "ctr-ps", "Dockerfile"),
                          text)
            # Exactly what the Dockerfile copies from the build context (the project's root), into an
            # empty directory (its WORKDIR).
            image = os.path.join(work, "image")
            os.makedirs(image)
            for source in dockerfile_copies(text):
                path = os.path.join(paths.REPO_ROOT, source)
                if os.path.isdir(path):
                    shutil.copytree(path, os.path.join(image, source),
                                    ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(path, os.path.join(image, source))
            probe = IMAGE_IMPORT_PROBE % (tuple(source_lib.SOURCE_PACKAGES),)
            result = command_line.run(["python", "-c", probe], image, timeout=300)
            self.assertEqual(0, result.returncode, command_line.describe("import deepfm.train", result))


if __name__ == "__main__":
    unittest.main()
