"""The job of `deepfm.sagemaker` on Kubernetes: render its manifests, or run them here as the operators would.

    python -m deepfm.kubernetes render --instance_count 2 --distribution parameter_server \\
        --channel train=data/synthetic --image registry.example/deepfm:1 --output_dir k8s/ps -- --num_epochs 1

    python -m deepfm.kubernetes local --manifest k8s/ps/tfjob.yaml --volume_dir /srv/deepfm \\
        --output_dir runs/k8s-ps

`render` takes the same job arguments as `deepfm.sagemaker` (hosts,
`--processes_per_host`, `--distribution parameter_server|mpi|auto`,
`--channel NAME=PATH` where PATH is inside the volume, the hyperparameters
after `--`) plus the cluster's: `--image`, `--namespace`, `--pvc` (an
existing ReadWriteMany claim) or `--storage_class`/`--volume_size` (a new
one), `--mount_path`, `--cpu`/`--memory`/`--gpus`, `--num_ps`,
`--backoff_limit`, `--min_replicas`/`--max_replicas` and `--metrics_port`.
It writes a TFJob (parameter servers) or an MPIJob (Horovod), a JobSet, the
PersistentVolumeClaim and the image's Dockerfile to `--output_dir`
(`jobs.kubernetes.manifests`).

`local` runs one rendered manifest (a TFJob, an MPIJob or a JobSet) on
emulated hosts, one per pod (root needed; see `jobs.kubernetes.local`):
`--volume_dir` stands for the claim, mounted by every pod at the manifest's
path, and the run's logs go to `--output_dir`. Each pod has its container's
`resources.limits.memory` (or `--host_memory`) as a memory cgroup's limit,
as the kubelet enforces it; a pod killed for memory is reported so, with its
peak and limit. It exits with the job's exit code.
"""

import sys

from absl import app, flags

from cli import config_flags, entry
from deepfm import job_flags
from jobs import spec as spec_lib
from jobs.kubernetes import job as kubernetes_job
from jobs.kubernetes import manifests
from planner import cost_model

COMMANDS = ("render", "local")
INSTANCE_TYPE = "kubernetes"
EXIT_USAGE = 2

FLAGS = flags.FLAGS
PROGRAM = "deepfm.kubernetes"


def define_flags() -> None:
    """The flags of both commands (`render` and `local` each ignore the other's)."""
    job_flags.define_job_flags()
    from jobs.kubernetes.local import run as kubernetes_local
    # render's and local's own flags, from their configs' fields
    config_flags.define_flags([kubernetes_job.KubernetesJob, kubernetes_job.Resources, kubernetes_local.LocalConfig])


def parse_job(flag_values, hyperparameter_args) -> kubernetes_job.KubernetesJob:
    """The `KubernetesJob` of the parsed flags and the arguments after `--`.

    Raises:
      ValueError: a bad flag or hyperparameter, named.
    """
    f = flag_values
    choice = None
    if f.distribution == spec_lib.DISTRIBUTION_AUTO:
        resources = kubernetes_job.Resources(cpu=f.cpu)
        choice = job_flags.auto_choice(f, resources.cores() or 1, cost_model.DEFAULT_UNLIMITED_GBPS)
        print(choice.describe(), file=sys.stderr)
    spec = job_flags.parse_spec(f, hyperparameter_args, INSTANCE_TYPE, choice)
    if not f.image:
        raise ValueError("--image is required: the job's container image (see the rendered Dockerfile)")
    return kubernetes_job.KubernetesJob(
        spec=spec, resources=kubernetes_job.Resources(**config_flags.values(kubernetes_job.Resources, f)),
        **config_flags.values(kubernetes_job.KubernetesJob, f))


def run_render(hyperparameter_args) -> int:
    """Writes the manifests; returns 0."""
    if not FLAGS.output_dir:
        raise app.UsageError("render needs --output_dir")
    try:
        job = parse_job(FLAGS, hyperparameter_args)
        paths = manifests.write(job, FLAGS.output_dir)
    except (ValueError, FileExistsError) as e:
        raise app.UsageError(str(e)) from e
    print("\n".join(paths))
    return 0


def run_local(extra_args) -> int:
    """Runs a rendered manifest on emulated hosts; returns the job's exit code."""
    from jobs.kubernetes.local import run as kubernetes_local
    from jobs.local import hosts as hosts_lib
    from jobs.local import memory as memory_lib
    from jobs.local import processes
    if extra_args:
        raise app.UsageError("local takes no arguments after --: the manifest holds the job's (got %s)"
                             % " ".join(extra_args))
    for flag in ("manifest", "volume_dir", "output_dir"):
        if not getattr(FLAGS, flag):
            raise app.UsageError("local needs --%s" % flag)
    try:
        config = kubernetes_local.LocalConfig(**config_flags.values(kubernetes_local.LocalConfig, FLAGS))
        local_run = kubernetes_local.run(config)
    except (ValueError, FileExistsError, hosts_lib.HostSetupError, memory_lib.MemoryLimitError) as e:
        print("deepfm.kubernetes local: %s" % e, file=sys.stderr)
        return EXIT_USAGE
    except (kubernetes_local.JobFailedError, TimeoutError) as e:
        print("deepfm.kubernetes local: the job failed: %s" % e, file=sys.stderr)
        return getattr(e, "returncode", 1) or 1
    except processes.Terminated as e:
        print("deepfm.kubernetes local: stopped by %s; every pod was stopped" % e, file=sys.stderr)
        return processes.SIGNAL_EXIT_BASE + e.signum
    print("job %s completed after %d restart(s) (%d elastic resize(s)), on %d training pod(s)" % (
        local_run.operator.name, local_run.restarts, local_run.resizes, local_run.final_workers))
    return 0


def main(argv):
    if len(argv) < 2 or argv[1] not in COMMANDS:
        raise app.UsageError("the first argument must be one of %s, got %r"
                             % (", ".join(COMMANDS), argv[1] if len(argv) > 1 else None))
    command, rest = argv[1], argv[2:]
    if command == "render":
        sys.exit(run_render(rest))
    sys.exit(run_local(rest))


def run():
    """Console-script entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)


if __name__ == "__main__":
    run()
