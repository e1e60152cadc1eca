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
`jobs.sagemaker_local`); its outputs, checkpoints and one log per host go to
`--output_dir`, and it exits with the job's exit code. `submit` builds the
job with the SageMaker Python SDK and submits it, with its checkpoints at
`<output_path>/<job_name>/checkpoints` unless `--checkpoint_s3_uri` or
`--nocheckpoints` says otherwise, and the metric definitions that plot its
training curves (`jobs.sagemaker_metrics`); `--tune NAME=RANGE` (repeatable)
submits a hyperparameter tuning job maximizing the validation AUC instead.
`--dry_run` prints the `CreateTrainingJob` (or
`CreateHyperParameterTuningJob`) request as JSON and contacts nothing.
"""

import os
import sys
from typing import Optional

from absl import app, flags

from cli import entry
from strategies import cost_model
from jobs import auto_distribution
from jobs import hosts as hosts_lib
from jobs import processes
from jobs import sagemaker_job
from jobs import sagemaker_submit

PROGRAM = "deepfm.sagemaker"

COMMANDS = ("local", "submit")
CHANNEL_SEPARATOR = "="
TRAIN_CHANNEL_PREFIX = "train"
EXIT_FAILURE = 1
EXIT_USAGE = 2

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The flags of both commands (`local` and `submit` each ignore the other's)."""
    flags.DEFINE_string("job_name", None, "Training job name (default: deepfm-<time>).")
    flags.DEFINE_integer("instance_count", 1, "Hosts (algo-1 .. algo-N).")
    flags.DEFINE_enum("distribution", sagemaker_job.DISTRIBUTION_NONE,
                      list(sagemaker_job.DISTRIBUTIONS) + [auto_distribution.AUTO],
                      "none, parameter_server, mpi (Horovod), or auto: the one deepfm.advise predicts fastest "
                      "for the instances (measured on --auto_data).")
    flags.DEFINE_string("auto_data", None, "--distribution auto: a local dataset root to measure a step on "
                        "(local: default the train channel's directory).")
    flags.DEFINE_integer("processes_per_host", 1, "mpi: processes per host.")
    flags.DEFINE_string("custom_mpi_options", "", "mpi: extra mpirun options.")
    flags.DEFINE_multi_string("channel", [], "NAME=PATH (local) or NAME=s3://... (submit); repeatable.")
    flags.DEFINE_enum("input_mode", sagemaker_job.FILE_MODE, list(sagemaker_job.INPUT_MODES),
                      "File or Pipe, for every channel without its own --channel_input_mode.")
    flags.DEFINE_multi_string("channel_input_mode", [], "NAME=File|Pipe: that channel's own input mode (e.g. "
                              "--input_mode Pipe --channel_input_mode validation=File); repeatable.")
    flags.DEFINE_enum("distribution_type", sagemaker_job.FULLY_REPLICATED, list(sagemaker_job.S3_DISTRIBUTIONS),
                      "S3 distribution of the training channels (train, train_<k>); others are replicated.")
    flags.DEFINE_bool("checkpoints", True, "Configure a checkpoint location (/opt/ml/checkpoints) that a "
                      "restarted job resumes from.")
    flags.DEFINE_string("region", sagemaker_job.DEFAULT_REGION, "AWS region.")
    # local
    flags.DEFINE_string("output_dir", None, "local: where hosts' /opt/ml, checkpoints and logs go.")
    flags.DEFINE_integer("cpus_per_host", 0, "local: cores each host is pinned to (0: not pinned).")
    flags.DEFINE_float("link_gbps", 0.0, "local: each host's egress bandwidth in Gbit/s (0: unlimited).")
    flags.DEFINE_bool("restart", False, "local: run again in --output_dir, resuming from its checkpoints.")
    flags.DEFINE_float("timeout_s", 0.0, "local: stop every host and fail after this many seconds (0: none).")
    # submit
    flags.DEFINE_string("instance_type", "ml.c5.xlarge", "submit: instance type.")
    flags.DEFINE_string("role", None, "submit: IAM role ARN of the job.")
    flags.DEFINE_string("output_path", None, "submit: s3:// prefix for the model artifacts and the source.")
    flags.DEFINE_string("checkpoint_s3_uri", None, "submit: s3:// prefix synced with /opt/ml/checkpoints "
                        "(default: <output_path>/<job_name>/checkpoints).")
    flags.DEFINE_bool("use_spot", False, "submit: managed spot training.")
    flags.DEFINE_integer("max_run", 24 * 3600, "submit: the job's time limit in seconds.")
    flags.DEFINE_integer("max_wait", None, "submit, spot: seconds to wait for capacity plus run.")
    flags.DEFINE_bool("dry_run", False, "submit: print the CreateTrainingJob (or CreateHyperParameterTuningJob) "
                      "request as JSON; contact nothing.")
    flags.DEFINE_multi_string("tune", [], "submit: a hyperparameter a tuning job searches, maximizing the "
                              "validation AUC: NAME=MIN..MAX (integers or numbers; :log for a logarithmic scale) "
                              "or NAME=A|B|C; repeatable.")
    flags.DEFINE_integer("tuning_max_jobs", sagemaker_submit.DEFAULT_MAX_JOBS,
                         "submit --tune: training jobs in all.")
    flags.DEFINE_integer("tuning_max_parallel_jobs", sagemaker_submit.DEFAULT_MAX_PARALLEL_JOBS,
                         "submit --tune: training jobs at a time.")


def _name_value_pairs(flag: str, values, what: str) -> dict:
    pairs = {}
    for value in values:
        name, separator, item = value.partition(CHANNEL_SEPARATOR)
        if not separator or not name or not item:
            raise ValueError("--%s %r must be NAME=%s" % (flag, value, what))
        if name in pairs:
            raise ValueError("--%s: channel %s is given more than once" % (flag, name))
        pairs[name] = item
    return pairs


def parse_channels(values, distribution_type: str, input_modes=()):
    """`--channel NAME=PATH` values as `Channel`s; `distribution_type` applies to training channels.

    Args:
      values: the `--channel` values.
      distribution_type: the S3 distribution of the training channels.
      input_modes: `--channel_input_mode NAME=MODE` values.

    Raises:
      ValueError: a value without `=`, a bad channel name or mode, or an
        input mode for a channel that is not given.
    """
    modes = _name_value_pairs("channel_input_mode", input_modes, "File|Pipe")
    channels = []
    for value in values:
        name, separator, uri = value.partition(CHANNEL_SEPARATOR)
        if not separator or not name or not uri:
            raise ValueError("--channel %r must be NAME=PATH" % value)
        distribution = distribution_type if name.startswith(TRAIN_CHANNEL_PREFIX) else sagemaker_job.FULLY_REPLICATED
        channels.append(sagemaker_job.Channel(name=name, uri=uri, distribution=distribution,
                                              input_mode=modes.pop(name, None)))
    if modes:
        raise ValueError("--channel_input_mode names channel(s) %s, which no --channel gives"
                         % ", ".join(sorted(modes)))
    return tuple(channels)


def parse_spec(flag_values, hyperparameter_args, instance_type: str,
               choice: Optional[auto_distribution.Choice] = None) -> sagemaker_job.JobSpec:
    """The `JobSpec` of the parsed flags and the arguments after `--`.

    Args:
      flag_values: the parsed flags.
      hyperparameter_args: the arguments after `--`.
      instance_type: the instances' type.
      choice: what `--distribution auto` resolved to (its distribution
        replaces the flag's; its hyperparameters are added unless given).

    Raises:
      ValueError: a bad flag or hyperparameter, named.
    """
    f = flag_values
    hyperparameters = sagemaker_job.parse_hyperparameters(hyperparameter_args)
    distribution, processes_per_host = f.distribution, f.processes_per_host
    if choice is not None:
        distribution, processes_per_host = choice.distribution, choice.processes_per_host
        hyperparameters = dict(choice.hyperparameters, **hyperparameters)
    return sagemaker_job.JobSpec(
        job_name=f.job_name or sagemaker_job.default_job_name(), instance_count=f.instance_count,
        instance_type=instance_type, distribution=distribution, processes_per_host=processes_per_host,
        custom_mpi_options=f.custom_mpi_options, input_mode=f.input_mode,
        channels=parse_channels(f.channel, f.distribution_type, f.channel_input_mode),
        hyperparameters=hyperparameters, checkpoints=f.checkpoints, region=f.region)


def auto_choice(flag_values, command: str, instance_type: str) -> auto_distribution.Choice:
    """Resolves `--distribution auto` for the job's instances (see `jobs.auto_distribution`).

    Local hosts have `--cpus_per_host` cores (0: this machine's cores shared
    among them) and a `--link_gbps` link (0: unlimited); submitted instances
    have their type's cores and network.

    Raises:
      ValueError: as `auto_distribution.choose`, or an instance type of unknown shape.
    """
    f = flag_values
    if command == "local":
        cores = f.cpus_per_host or max(1, (os.cpu_count() or 1) // f.instance_count)
        link = f.link_gbps or cost_model.DEFAULT_UNLIMITED_GBPS
        data = f.auto_data or _local_train_directory(f.channel)
    else:
        cores, link = cost_model.instance_shape(instance_type) if f.instance_count > 1 else (1, 0.0)
        data = f.auto_data
    if f.processes_per_host != 1:
        raise ValueError("--processes_per_host %d and --distribution auto: auto chooses the processes per host"
                         % f.processes_per_host)
    return auto_distribution.choose(data, f.instance_count, cores, link)


def _local_train_directory(channel_values) -> Optional[str]:
    for value in channel_values:
        name, _, uri = value.partition(CHANNEL_SEPARATOR)
        if name.startswith(TRAIN_CHANNEL_PREFIX) and os.path.isdir(uri):
            return uri
    return None


def run_local(spec: sagemaker_job.JobSpec) -> int:
    """Runs the job on emulated hosts; returns its exit code."""
    from jobs import sagemaker_local  # pylint: disable=import-outside-toplevel
    if not FLAGS.output_dir:
        raise app.UsageError("local needs --output_dir")
    try:
        config = sagemaker_local.LocalConfig(spec=spec, output_dir=FLAGS.output_dir,
                                             cpus_per_host=FLAGS.cpus_per_host, link_gbps=FLAGS.link_gbps,
                                             restart=FLAGS.restart, timeout_s=FLAGS.timeout_s)
        sagemaker_local.run(config)
    except (ValueError, FileExistsError, hosts_lib.HostSetupError) as e:
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


def run_submit(spec: sagemaker_job.JobSpec) -> int:
    """Submits the job (or prints its request); returns 0."""
    for flag in ("role", "output_path"):
        if not getattr(FLAGS, flag):
            raise app.UsageError("submit needs --%s" % flag)
    try:
        tuning = None
        if FLAGS.tune:
            tuning = sagemaker_submit.TuningConfig(
                ranges=tuple(sagemaker_submit.ParameterRange.parse(text) for text in FLAGS.tune),
                max_jobs=FLAGS.tuning_max_jobs, max_parallel_jobs=FLAGS.tuning_max_parallel_jobs)
        config = sagemaker_submit.SubmitConfig(
            spec=spec, role=FLAGS.role, output_path=FLAGS.output_path, instance_type=FLAGS.instance_type,
            checkpoint_s3_uri=FLAGS.checkpoint_s3_uri or None, use_spot=FLAGS.use_spot, max_run_s=FLAGS.max_run,
            max_wait_s=FLAGS.max_wait, dry_run=FLAGS.dry_run, tuning=tuning)
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
    instance_type = FLAGS.instance_type if command == "submit" else sagemaker_job.LOCAL_INSTANCE_TYPE
    try:
        choice = None
        if FLAGS.distribution == auto_distribution.AUTO:
            choice = auto_choice(FLAGS, command, instance_type)
            print(choice.describe(), file=sys.stderr)
        spec = parse_spec(FLAGS, hyperparameter_args, instance_type, choice)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    sys.exit(run_local(spec) if command == "local" else run_submit(spec))


def run():
    """Console-script entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)


if __name__ == "__main__":
    run()
