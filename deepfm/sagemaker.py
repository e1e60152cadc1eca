"""A SageMaker training job: run here on emulated hosts, or submit it.

    python -m deepfm.sagemaker local --instance_count 2 --distribution parameter_server \\
        --channel train=data/synthetic --output_dir runs/sm-ps -- --num_epochs 1

    python -m deepfm.sagemaker submit --instance_count 2 --distribution parameter_server \\
        --channel train=s3://bucket/synthetic/train --channel validation=s3://bucket/synthetic/validation \\
        --role arn:aws:iam::123456789012:role/SageMaker --output_path s3://bucket/jobs --dry_run -- --num_epochs 1

Both take the same job: `--instance_count` hosts, `--distribution`
(`none`, `parameter_server`, `mpi` with `--processes_per_host`),
`--channel NAME=PATH` (repeatable; `train` and `validation`, or the
converter's dataset root as `train`), `--input_mode File|Pipe` (and a
channel's own with `--channel_input_mode NAME=MODE`), `--distribution_type
ShardedByS3Key` (for the training channels), and the hyperparameters after
`--`, which reach `examples/sagemaker_entry_point.py` as SageMaker passes
them.

`local` runs SageMaker's own training toolkit on `algo-1..N`, each a network
namespace pinned to `--cpus_per_host` cores (root needed; see
`jobs.sagemaker.local`), each with `--host_memory` of memory if given (a
memory cgroup; a host killed for memory is reported with its peak and
limit); its outputs, checkpoints and one log per host go to
`--output_dir`, and it exits with the job's exit code. `submit` builds the
job with the SageMaker Python SDK and submits it, with its checkpoints at
`<output_path>/<job_name>/checkpoints` unless `--checkpoint_s3_uri` or
`--nocheckpoints` says otherwise, and the metric definitions that plot its
training curves (`jobs.sagemaker.metrics`); `--tune NAME=RANGE` (repeatable)
submits a hyperparameter tuning job maximizing the validation AUC instead.
`--dry_run` prints the `CreateTrainingJob` (or
`CreateHyperParameterTuningJob`) request as JSON and contacts nothing.
"""

import os
import sys

from absl import app, flags

from cli import config_flags, entry
from deepfm import job_flags
from jobs import auto_distribution
from jobs import spec as spec_lib
from jobs.local import hosts as hosts_lib
from jobs.local import memory as memory_lib
from jobs.local import processes
from jobs.sagemaker import submit as sagemaker_submit
from planner import cost_model
from strategies import host_cores

PROGRAM = "deepfm.sagemaker"

COMMANDS = ("local", "submit")
EXIT_FAILURE = 1
EXIT_USAGE = 2

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The flags of both commands (`local` and `submit` each ignore the other's)."""
    job_flags.define_job_flags()
    from jobs.sagemaker import local as sagemaker_local
    # local's and submit's own flags, from their configs' fields
    config_flags.define_flags([sagemaker_local.LocalConfig, sagemaker_submit.SubmitConfig,
                               sagemaker_submit.TuningConfig])


def auto_choice(flag_values, command: str, instance_type: str) -> auto_distribution.Choice:
    """Resolves `--distribution auto` for the job's instances (see `jobs.auto_distribution`).

    Local hosts have `--cpus_per_host` vCPUs (0: this machine's shared among
    them; physical cores in the machine's proportion) and a `--link_gbps`
    link (0: unlimited); submitted instances have their type's cores, vCPUs
    (two hyperthreads per core) and network.

    Raises:
      ValueError: as `job_flags.auto_choice`, or an instance type of unknown shape.
    """
    f = flag_values
    if command == "local":
        vcpus = f.cpus_per_host or max(1, (os.cpu_count() or 1) // f.instance_count)
        return job_flags.auto_choice(f, host_cores.cores_of(vcpus), f.link_gbps or cost_model.DEFAULT_UNLIMITED_GBPS,
                                     vcpus_per_host=vcpus)
    if f.instance_count == 1 and not f.auto_data:
        # Nothing to measure: one process, whatever the type's shape.
        return job_flags.auto_choice(f, 1, cost_model.DEFAULT_UNLIMITED_GBPS, data=None)
    cores, link = cost_model.instance_shape(instance_type)
    return job_flags.auto_choice(f, cores, link, data=None, vcpus_per_host=cost_model.instance_vcpus(instance_type))


def run_local(spec: spec_lib.JobSpec) -> int:
    """Runs the job on emulated hosts; returns its exit code."""
    from jobs.sagemaker import local as sagemaker_local
    if not FLAGS.output_dir:
        raise app.UsageError("local needs --output_dir")
    try:
        config = sagemaker_local.LocalConfig(spec=spec, **config_flags.values(sagemaker_local.LocalConfig, FLAGS))
        sagemaker_local.run(config)
    except (ValueError, FileExistsError, hosts_lib.HostSetupError, memory_lib.MemoryLimitError) as e:
        print("deepfm.sagemaker local: %s" % e, file=sys.stderr)
        return EXIT_USAGE
    except (sagemaker_local.JobFailedError, TimeoutError) as e:
        print("deepfm.sagemaker local: job %s failed: %s" % (spec.job_name, e), file=sys.stderr)
        print(sagemaker_local.summary(config), file=sys.stderr)
        return getattr(e, "returncode", EXIT_FAILURE) or EXIT_FAILURE
    except processes.Terminated as e:
        print("deepfm.sagemaker local: stopped by %s; every host was stopped" % e, file=sys.stderr)
        return processes.SIGNAL_EXIT_BASE + e.signum
    print("job %s completed\n%s" % (spec.job_name, sagemaker_local.summary(config)))
    return 0


def run_submit(spec: spec_lib.JobSpec) -> int:
    """Submits the job (or prints its request); returns 0."""
    for flag in ("role", "output_path"):
        if not getattr(FLAGS, flag):
            raise app.UsageError("submit needs --%s" % flag)
    try:
        tuning_values = config_flags.values(sagemaker_submit.TuningConfig, FLAGS)
        tuning = sagemaker_submit.TuningConfig(**tuning_values) if tuning_values["ranges"] else None
        values = config_flags.values(sagemaker_submit.SubmitConfig, FLAGS)
        values.update(checkpoint_s3_uri=values["checkpoint_s3_uri"] or None)
        config = sagemaker_submit.SubmitConfig(spec=spec, tuning=tuning, **values)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    if config.checkpoint_uri:
        print("checkpoints: %s (--checkpoint_s3_uri to choose another, --nocheckpoints for none)"
              % config.checkpoint_uri, file=sys.stderr)
    elif config.tuning is not None:
        print("checkpoints: none (the tuning job's training jobs would share them)", file=sys.stderr)
    result = sagemaker_submit.submit(config)
    print(sagemaker_submit.request_json(result))
    return 0


def main(argv):
    if len(argv) < 2 or argv[1] not in COMMANDS:
        raise app.UsageError("the first argument must be one of %s, got %r"
                             % (", ".join(COMMANDS), argv[1] if len(argv) > 1 else None))
    command, hyperparameter_args = argv[1], argv[2:]
    instance_type = FLAGS.instance_type if command == "submit" else spec_lib.LOCAL_INSTANCE_TYPE
    try:
        choice = None
        if FLAGS.distribution == spec_lib.DISTRIBUTION_AUTO:
            choice = auto_choice(FLAGS, command, instance_type)
            print(choice.describe(), file=sys.stderr)
        spec = job_flags.parse_spec(FLAGS, hyperparameter_args, instance_type, choice)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    sys.exit(run_local(spec) if command == "local" else run_submit(spec))


def run():
    """Console-script entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)


if __name__ == "__main__":
    run()
