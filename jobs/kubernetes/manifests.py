"""The job of `deepfm.sagemaker` as Kubernetes manifests: a Kubeflow TFJob or MPIJob, a JobSet, a volume.

`jobs.kubernetes.job.KubernetesJob` wraps a `jobs.spec.JobSpec` (the same
job arguments) with what a cluster needs: the image, the namespace, the
ReadWriteMany volume that holds the data and the checkpoints, the requests,
the parameter servers, the retry budget and the elastic bounds. `render`
turns it into manifests, built with the official models: the `kubernetes`
client's V1 models for the built-in kinds, the Kubeflow training SDK's
models for TFJob (`kubeflow.org/v1`) and MPIJob (`kubeflow.org/v2beta1`:
the SDK's MPIJob model holds the fields both versions share, the only ones
used here), and the Kubeflow Trainer API's JobSet models
(`jobset.x-k8s.io/v1alpha2`). `write` writes them as YAML files beside the
`Dockerfile` of the job's image.

* Parameter servers: a TFJob (`Chief`, `Worker`, `PS`; container
  `tensorflow`, port 2222; the operator writes `TF_CONFIG`) and a JobSet
  (replicated jobs `chief`, `worker`, `ps`; `jobs.kubernetes.entry` builds
  `TF_CONFIG` from the pods' stable host names).
* Horovod: an MPIJob (a launcher running `mpirun` over the operator's
  hostfile, workers running sshd) and a JobSet (workers first, then the
  launcher, the hostfile in a ConfigMap, the ssh keys in a Secret the user
  creates).
* Restarts follow the exit codes (`jobs.kubernetes.entry`): a stop after a
  checkpoint and a lost parameter server leave the pod with a code in the
  operators' retryable range, as a killed pod does; any other failure (a bad
  flag, bad data) is permanent. TFJob: `restartPolicy: ExitCode`. JobSet: a
  pod failure policy fails the Job on a permanent code, and the JobSet's
  failure policy fails the whole set on that, else restarts it. Every kind
  retries at most `backoff_limit` times.

This module never imports TensorFlow; the models are imported when rendering.
"""

import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import yaml

from jobs import source as source_lib
from jobs import spec as spec_lib
from jobs.kubernetes import entry as kubernetes_entry
from jobs.kubernetes.job import KubernetesJob

TFJOB_API_VERSION = "kubeflow.org/v1"
MPIJOB_API_VERSION = "kubeflow.org/v2beta1"
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
TFJOB, MPIJOB, JOBSET = "TFJob", "MPIJob", "JobSet"
TF_CONTAINER = "tensorflow"
TF_PORT = 2222
TF_PORT_NAME = "tfjob-port"
MPI_CONTAINER = "mpi"
# The Kubeflow operators' replica types and JobSet's replicated jobs (named as the TF_CONFIG jobs).
CHIEF, WORKER, PS, LAUNCHER = "Chief", "Worker", "PS", "Launcher"
JOBSET_CHIEF, JOBSET_WORKER, JOBSET_PS, JOBSET_LAUNCHER = "chief", "worker", "ps", "launcher"
RESTART_EXIT_CODE = "ExitCode"
RESTART_NEVER = "Never"
RESTART_ON_FAILURE = "OnFailure"
CLEAN_POD_POLICY = "Running"
DATA_VOLUME = "data"
READ_WRITE_MANY = "ReadWriteMany"
PYTHON = "python"
TRAIN_MODULE = "deepfm.train"
ENTRY_MODULE = "jobs.kubernetes.entry"
# The labels of every pod of a job, and the elastic bounds the local runner reads.
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
APP_NAME = "deepfm"
MIN_REPLICAS_ANNOTATION = "deepfm/min-replicas"
MAX_REPLICAS_ANNOTATION = "deepfm/max-replicas"
SCRAPE_ANNOTATIONS = ("prometheus.io/scrape", "prometheus.io/port", "prometheus.io/path")
METRICS_PATH = "/metrics"
# MPI: where the operator mounts the hostfile and the ssh keys, and what it sets in the launcher.
MPI_CONFIG_PATH = "/etc/mpi"
HOSTFILE = "hostfile"
SSH_PATH = "/root/.ssh"
SSH_SECRET_SUFFIX = "-ssh"
MPI_CONFIG_SUFFIX = "-mpi"
SSH_KEY_FILES = (("ssh-privatekey", "id_rsa"), ("ssh-publickey", "id_rsa.pub"), ("ssh-publickey", "authorized_keys"))
SSH_SECRET_MODE = 0o600
SSHD_COMMAND = ("/usr/sbin/sshd", "-De")
MPIRUN_OPTIONS = ("--allow-run-as-root", "--tag-output", "-bind-to", "none", "-map-by", "slot",
                  "-mca", "pml", "ob1", "-mca", "btl", "^openib", "-mca", "orte_abort_on_non_zero_status", "1",
                  "-x", "PATH", "-x", "PYTHONPATH", "-x", "LD_LIBRARY_PATH")
OPEN_MPI_ENV = (("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                ("OMPI_MCA_orte_default_hostfile", MPI_CONFIG_PATH + "/" + HOSTFILE),
                ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"))
OPEN_MPI_SLOTS_ENV = "OMPI_MCA_orte_set_default_slots"
# JobSet: the downward-API source of a pod's replicated job, and the reasons its failure policy reads.
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
POD_FAILURE_POLICY_REASON = "PodFailurePolicy"
DOCKERFILE = "Dockerfile"
SAGEMAKER_IMAGE_ACCOUNT = "763104351884"
# The SageMaker Python SDK's `image_uris.retrieve("tensorflow", region, "2.14.1", py_version="py310")`.
SAGEMAKER_TF_IMAGE_TAGS = {False: "2.14.1-cpu-py310", True: "2.14.1-gpu-py310"}
DOCKERFILE_TEMPLATE = """\
# The image of the job `{job}`: the SageMaker TensorFlow 2.14 training image (TensorFlow 2.14.1,
# Horovod 0.28.1, Open MPI, SageMaker's training toolkit: the stack of requirements/) plus this
# project. Build from the project's root:
#   docker build -f {path} -t {image} .
ARG BASE_IMAGE={account}.dkr.ecr.{region}.amazonaws.com/tensorflow-training:{tag}
FROM ${{BASE_IMAGE}}

# MPIJob workers run sshd; the launcher reaches them over ssh with the key the operator mounts at
# {ssh_path}, without host-key prompts.
RUN apt-get update && apt-get install -y --no-install-recommends openssh-server openssh-client \\
    && rm -rf /var/lib/apt/lists/* && mkdir -p /run/sshd && ssh-keygen -A \\
    && printf 'StrictHostKeyChecking no\\nUserKnownHostsFile /dev/null\\nLogLevel ERROR\\n' >> /etc/ssh/ssh_config \\
    && printf 'PermitRootLogin prohibit-password\\nStrictModes no\\n' >> /etc/ssh/sshd_config

WORKDIR /opt/deepfm
COPY {project_files} ./
{copy_packages}
RUN pip install --no-cache-dir --no-deps . && pip install --no-cache-dir prometheus-client=={prometheus}
ENV PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
"""
PROMETHEUS_CLIENT_VERSION = "0.26.0"
# What `pip install .` in the image reads besides the packages (setup.cfg's long_description is README.md).
PROJECT_FILES = ("pyproject.toml", "setup.cfg", "README.md")


def pod_name(job: str, replica_type: str, index: int) -> str:
    """The name (and host name) the Kubeflow operators give replica `index` of `replica_type`."""
    return "%s-%s-%d" % (job, replica_type.lower(), index)


def jobset_host(job: KubernetesJob, replicated_job: str, index: int) -> str:
    """The stable host name of pod `index` of a JobSet's replicated job (its one Job, index 0)."""
    return "%s-%s-0-%d.%s" % (job.name, replicated_job, index, job.name)


def hostfile(hosts: Sequence[str], slots: int) -> str:
    """An Open MPI hostfile: one `host slots=N` line per host."""
    return "".join("%s slots=%d\n" % (host, slots) for host in hosts)


def _client():
    from kubernetes import client
    return client


def to_dict(model) -> dict:
    """A `kubernetes` or Kubeflow training SDK model as the API's JSON (camelCase keys, no nulls)."""
    return _client().ApiClient().sanitize_for_serialization(model)


def _labels(job: KubernetesJob) -> Dict[str, str]:
    return {NAME_LABEL: APP_NAME, INSTANCE_LABEL: job.name}


def _metadata(job: KubernetesJob, name: str, annotations: Optional[Dict[str, str]] = None):
    return _client().V1ObjectMeta(name=name, namespace=job.namespace, labels=_labels(job),
                                  annotations=annotations or None)


def _job_annotations(job: KubernetesJob) -> Dict[str, str]:
    if not job.elastic:
        return {}
    return {MIN_REPLICAS_ANNOTATION: str(job.min_workers), MAX_REPLICAS_ANNOTATION: str(job.max_workers)}


def _scrape_annotations(job: KubernetesJob) -> Dict[str, str]:
    if not job.metrics_port:
        return {}
    return dict(zip(SCRAPE_ANNOTATIONS, ("true", str(job.metrics_port), METRICS_PATH)))


def _pod_template(job: KubernetesJob, container, annotations: Dict[str, str], restart_policy: Optional[str] = None,
                  volumes: Sequence = (), labels: Optional[Dict[str, str]] = None):
    client = _client()
    data = client.V1Volume(name=DATA_VOLUME, persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
        claim_name=job.claim_name))
    return client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=dict(_labels(job), **(labels or {})), annotations=annotations or None),
        spec=client.V1PodSpec(containers=[container], volumes=[data] + list(volumes), restart_policy=restart_policy))


def _container(job: KubernetesJob, name: str, command: Sequence[str], args: Sequence[str] = (),
               env: Sequence = (), ports: Sequence = (), mounts: Sequence = (), resources=None):
    client = _client()
    return client.V1Container(
        name=name, image=job.image, command=list(command), args=list(args) or None, env=list(env) or None,
        ports=list(ports) or None, resources=resources,
        volume_mounts=[client.V1VolumeMount(name=DATA_VOLUME, mount_path=job.mount_path)] + list(mounts))


def entry_command() -> List[str]:
    """The training containers' command: `jobs.kubernetes.entry`, which runs its arguments after `--`."""
    return [PYTHON, "-m", ENTRY_MODULE, "--"]


def train_command(job: KubernetesJob) -> List[str]:
    """`python -m deepfm.train` with the job's flags."""
    return [PYTHON, "-m", TRAIN_MODULE] + job.train_args()


def mpirun_command(job: KubernetesJob) -> List[str]:
    """The launcher's `mpirun`: every slot of the hostfile runs one rank."""
    custom = job.spec.mpi_options().split()
    return ["mpirun"] + list(MPIRUN_OPTIONS) + custom + train_command(job)


def _tf_container(job: KubernetesJob, env: Sequence = ()):
    client = _client()
    return _container(job, TF_CONTAINER, entry_command(), train_command(job), env=env,
                      ports=[client.V1ContainerPort(name=TF_PORT_NAME, container_port=TF_PORT)],
                      resources=job.resources.to_model())


def _tf_replicas(job: KubernetesJob) -> List[Tuple[str, int]]:
    """(replica type, count) of a TFJob: the chief, the other training pods, the parameter servers."""
    replicas = [(CHIEF, 1)]
    if job.spec.instance_count > 1:
        replicas.append((WORKER, job.spec.instance_count - 1))
    if job.spec.distribution == spec_lib.DISTRIBUTION_PS:
        replicas.append((PS, job.num_ps))
    return replicas


def _run_policy(job: KubernetesJob):
    from kubeflow.training import models
    scheduling = None
    if job.elastic:
        fixed = job.num_ps if job.spec.distribution == spec_lib.DISTRIBUTION_PS else 1
        scheduling = models.KubeflowOrgV1SchedulingPolicy(min_available=job.min_workers + fixed)
    return models.KubeflowOrgV1RunPolicy(backoff_limit=job.backoff_limit, clean_pod_policy=CLEAN_POD_POLICY,
                                         scheduling_policy=scheduling)


def tfjob(job: KubernetesJob) -> dict:
    """The TFJob of a parameter-server (or single-process) job."""
    from kubeflow.training import models
    specs = {}
    for replica_type, count in _tf_replicas(job):
        annotations = _scrape_annotations(job) if replica_type == CHIEF else {}
        specs[replica_type] = models.KubeflowOrgV1ReplicaSpec(
            replicas=count, restart_policy=RESTART_EXIT_CODE,
            template=_pod_template(job, _tf_container(job), annotations))
    model = models.KubeflowOrgV1TFJob(
        api_version=TFJOB_API_VERSION, kind=TFJOB, metadata=_metadata(job, job.name, _job_annotations(job)),
        spec=models.KubeflowOrgV1TFJobSpec(run_policy=_run_policy(job), tf_replica_specs=specs))
    return to_dict(model)


def _ssh_volume(secret: str):
    client = _client()
    return client.V1Volume(name="ssh-auth", secret=client.V1SecretVolumeSource(
        secret_name=secret, default_mode=SSH_SECRET_MODE,
        items=[client.V1KeyToPath(key=key, path=path) for key, path in SSH_KEY_FILES]))


def _ssh_mount():
    return _client().V1VolumeMount(name="ssh-auth", mount_path=SSH_PATH)


def mpijob(job: KubernetesJob) -> dict:
    """The MPIJob (v2beta1) of a Horovod job: workers run sshd; the operator adds the hostfile and ssh keys."""
    from kubeflow.training import models
    launcher = _container(job, MPI_CONTAINER, entry_command(), mpirun_command(job))
    worker = _container(job, MPI_CONTAINER, SSHD_COMMAND, resources=job.resources.to_model())
    specs = {
        LAUNCHER: models.KubeflowOrgV1ReplicaSpec(replicas=1, restart_policy=RESTART_ON_FAILURE,
                                                  template=_pod_template(job, launcher, {})),
        WORKER: models.KubeflowOrgV1ReplicaSpec(
            replicas=job.spec.instance_count, restart_policy=RESTART_ON_FAILURE,
            template=_pod_template(job, worker, _scrape_annotations(job))),
    }
    model = models.KubeflowOrgV1MPIJob(
        api_version=MPIJOB_API_VERSION, kind=MPIJOB, metadata=_metadata(job, job.name, _job_annotations(job)),
        spec=models.KubeflowOrgV1MPIJobSpec(slots_per_worker=job.spec.processes_per_host,
                                            run_policy=_run_policy(job), mpi_replica_specs=specs))
    return to_dict(model)


def _pod_failure_policy(container: str):
    """Fail the Job (a permanent failure) on any exit code outside the retryable ones."""
    client = _client()
    return client.V1PodFailurePolicy(rules=[client.V1PodFailurePolicyRule(
        action="FailJob", on_exit_codes=client.V1PodFailurePolicyOnExitCodesRequirement(
            container_name=container, operator="NotIn", values=list(kubernetes_entry.RETRYABLE_POD_EXIT_CODES)))])


def _indexed_job(job: KubernetesJob, template, count: int, failure_container: Optional[str]):
    client = _client()
    return client.V1JobTemplateSpec(spec=client.V1JobSpec(
        completion_mode="Indexed", completions=count, parallelism=count, backoff_limit=0,
        pod_failure_policy=_pod_failure_policy(failure_container) if failure_container else None,
        template=template))


def _jobset_roles(job: KubernetesJob) -> List[Tuple[str, int, object, Optional[str]]]:
    """(replicated job, pods, pod template, container whose exit codes are judged), in start order."""
    client = _client()
    if job.spec.distribution == spec_lib.DISTRIBUTION_MPI:
        env = [client.V1EnvVar(name=name, value=value) for name, value in OPEN_MPI_ENV]
        env.append(client.V1EnvVar(name=OPEN_MPI_SLOTS_ENV, value=str(job.spec.processes_per_host)))
        config = client.V1Volume(name="mpi-job-config", config_map=client.V1ConfigMapVolumeSource(
            name=job.name + MPI_CONFIG_SUFFIX))
        config_mount = client.V1VolumeMount(name="mpi-job-config", mount_path=MPI_CONFIG_PATH)
        secret = job.name + SSH_SECRET_SUFFIX
        launcher = _container(job, MPI_CONTAINER, entry_command(), mpirun_command(job), env=env,
                              mounts=[config_mount, _ssh_mount()])
        worker = _container(job, MPI_CONTAINER, SSHD_COMMAND, mounts=[_ssh_mount()],
                            resources=job.resources.to_model())
        return [
            (JOBSET_WORKER, job.spec.instance_count,
             _pod_template(job, worker, _scrape_annotations(job), RESTART_NEVER, [_ssh_volume(secret)]), None),
            (JOBSET_LAUNCHER, 1,
             _pod_template(job, launcher, {}, RESTART_NEVER, [config, _ssh_volume(secret)]), MPI_CONTAINER),
        ]
    cluster = {}
    roles = []
    for replica_type, count in _tf_replicas(job):
        name = replica_type.lower()
        cluster[name] = ["%s:%d" % (jobset_host(job, name, i), TF_PORT) for i in range(count)]
        roles.append((name, count))
    env = [client.V1EnvVar(name=kubernetes_entry.CLUSTER_VARIABLE, value=json.dumps(cluster, sort_keys=True)),
           client.V1EnvVar(name=kubernetes_entry.TASK_TYPE_VARIABLE, value_from=client.V1EnvVarSource(
               field_ref=client.V1ObjectFieldSelector(field_path="metadata.labels['%s']" % REPLICATED_JOB_LABEL)))]
    return [(name, count, _pod_template(job, _tf_container(job, env),
                                        _scrape_annotations(job) if name == JOBSET_CHIEF else {}, RESTART_NEVER),
             TF_CONTAINER) for name, count in roles]


def missing_fields(expected, actual, path: str = "") -> List[str]:
    """The paths of `expected`'s fields that `actual` lacks or holds another value at (added ones are allowed)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return [found for key, value in expected.items()
                for found in (missing_fields(value, actual[key], "%s.%s" % (path, key)) if key in actual
                              else ["%s.%s" % (path, key)])]
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [found for index, (value, other) in enumerate(zip(expected, actual))
                for found in missing_fields(value, other, "%s[%d]" % (path, index))]
    return [] if expected == actual else [path or "."]


def jobset(job: KubernetesJob) -> List[dict]:
    """The JobSet of the job, after the objects it needs: its headless Service (and the MPI hostfile)."""
    from kubeflow_trainer_api import models
    client = _client()
    roles = _jobset_roles(job)
    replicated = []
    for name, count, template, judged in roles:
        template_dict = to_dict(_indexed_job(job, template, count, judged))
        model = models.IoK8sApiBatchV1JobTemplateSpec.from_dict(template_dict)
        dropped = missing_fields(template_dict, model.to_dict())
        if dropped:
            raise ValueError("the JobSet models of kubeflow-trainer-api dropped %s of the %s Job template: a "
                             "version mismatch with the kubernetes client" % (", ".join(dropped), name))
        replicated.append(models.JobsetV1alpha2ReplicatedJob(name=name, replicas=1, template=model))
    mpi = job.spec.distribution == spec_lib.DISTRIBUTION_MPI
    finished = JOBSET_LAUNCHER if mpi else JOBSET_CHIEF
    spec = models.JobsetV1alpha2JobSetSpec(
        replicated_jobs=replicated,
        network=models.JobsetV1alpha2Network(enable_dns_hostnames=True, subdomain=job.name,
                                             publish_not_ready_addresses=True),
        success_policy=models.JobsetV1alpha2SuccessPolicy(operator="All", target_replicated_jobs=[finished]),
        failure_policy=models.JobsetV1alpha2FailurePolicy(
            max_restarts=job.backoff_limit,
            rules=[models.JobsetV1alpha2FailurePolicyRule(name="permanent-failure", action="FailJobSet",
                                                          on_job_failure_reasons=[POD_FAILURE_POLICY_REASON])]),
        startup_policy=models.JobsetV1alpha2StartupPolicy(startup_policy_order="InOrder") if mpi else None)
    metadata = models.IoK8sApimachineryPkgApisMetaV1ObjectMeta(
        name=job.name, namespace=job.namespace, labels=_labels(job), annotations=_job_annotations(job) or None)
    model = models.JobsetV1alpha2JobSet(api_version=JOBSET_API_VERSION, kind=JOBSET, metadata=metadata, spec=spec)
    service = client.V1Service(
        api_version="v1", kind="Service", metadata=_metadata(job, job.name),
        spec=client.V1ServiceSpec(cluster_ip="None", publish_not_ready_addresses=True,
                                  selector={"jobset.sigs.k8s.io/jobset-name": job.name}))
    documents = [to_dict(service)]
    if mpi:
        hosts = [jobset_host(job, JOBSET_WORKER, i) for i in range(job.spec.instance_count)]
        config_map = client.V1ConfigMap(api_version="v1", kind="ConfigMap",
                                        metadata=_metadata(job, job.name + MPI_CONFIG_SUFFIX),
                                        data={HOSTFILE: hostfile(hosts, job.spec.processes_per_host)})
        documents.append(to_dict(config_map))
    return documents + [model.to_dict()]


def persistent_volume_claim(job: KubernetesJob) -> dict:
    """The ReadWriteMany claim holding the data and the checkpoints (FSx for Lustre, EFS)."""
    client = _client()
    model = client.V1PersistentVolumeClaim(
        api_version="v1", kind="PersistentVolumeClaim", metadata=_metadata(job, job.claim_name),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=[READ_WRITE_MANY], storage_class_name=job.storage_class or None,
            resources=client.V1VolumeResourceRequirements(requests={"storage": job.volume_size})))
    return to_dict(model)


def render(job: KubernetesJob) -> Dict[str, List[dict]]:
    """File name -> the manifests it holds, in apply order.

    `pvc.yaml` (unless `job.pvc` names an existing claim), `tfjob.yaml` (parameter
    servers, or one process) or `mpijob.yaml` (Horovod), and `jobset.yaml`.
    """
    files: Dict[str, List[dict]] = {}
    if not job.pvc:
        files["pvc.yaml"] = [persistent_volume_claim(job)]
    if job.spec.distribution == spec_lib.DISTRIBUTION_MPI:
        files["mpijob.yaml"] = [mpijob(job)]
    else:
        files["tfjob.yaml"] = [tfjob(job)]
    files["jobset.yaml"] = jobset(job)
    return files


def dockerfile(job: KubernetesJob, path: str = DOCKERFILE) -> str:
    """The job image's Dockerfile: the SageMaker TensorFlow 2.14 training image (CPU, or GPU where the job asks
    for GPUs) of the job's region, plus this project: every package a SageMaker job ships
    (`jobs.source.SOURCE_PACKAGES`, the one list of them).

    Args:
      job: the job.
      path: the Dockerfile's path as `docker build -f` takes it from the project's root.
    """
    copies = "\n".join("COPY %s %s" % (package, package) for package in source_lib.SOURCE_PACKAGES)
    return DOCKERFILE_TEMPLATE.format(job=job.name, path=path, image=job.image, account=SAGEMAKER_IMAGE_ACCOUNT,
                                      region=job.spec.region, tag=SAGEMAKER_TF_IMAGE_TAGS[job.resources.gpus > 0],
                                      ssh_path=SSH_PATH, project_files=" ".join(PROJECT_FILES),
                                      copy_packages=copies, prometheus=PROMETHEUS_CLIENT_VERSION)


def build_path(output_dir: str, root: Optional[str] = None) -> str:
    """The path of the Dockerfile written to `output_dir`, as `docker build -f` takes it from the project's root.

    Relative to the project's root (`root`, default where this project's
    packages are) when `output_dir` is inside it (`k8s/ctr-ps/Dockerfile`
    for `--output_dir k8s/ctr-ps` run from the root), else absolute.
    """
    root = os.path.abspath(root or source_lib.project_root())
    path = os.path.abspath(os.path.join(output_dir, DOCKERFILE))
    relative = os.path.relpath(path, root)
    return path if relative.split(os.sep, 1)[0] == os.pardir else relative


def dump(documents: Sequence[dict]) -> str:
    """YAML documents separated by `---`, keys in the models' order."""
    return "---\n".join(yaml.safe_dump(document, sort_keys=False, default_flow_style=False) for document in documents)


def load(path: str) -> List[dict]:
    """The documents of a YAML manifest file (empty ones skipped)."""
    with open(path) as f:
        return [document for document in yaml.safe_load_all(f) if document]


def write(job: KubernetesJob, output_dir: str) -> List[str]:
    """Writes the manifests and the Dockerfile to `output_dir` (created); returns the paths written.

    Raises:
      FileExistsError: a file to write exists (nothing is overwritten).
    """
    files = render(job)
    paths = [os.path.join(output_dir, name) for name in list(files) + [DOCKERFILE]]
    existing = [path for path in paths if os.path.exists(path)]
    if existing:
        raise FileExistsError("--output_dir %s already holds %s: use a new directory"
                              % (output_dir, ", ".join(os.path.basename(p) for p in existing)))
    os.makedirs(output_dir, exist_ok=True)
    for name, documents in files.items():
        with open(os.path.join(output_dir, name), "w") as f:
            f.write(dump(documents))
    with open(os.path.join(output_dir, DOCKERFILE), "w") as f:
        f.write(dockerfile(job, build_path(output_dir)))
    return paths
