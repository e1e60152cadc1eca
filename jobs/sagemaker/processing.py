"""The Criteo conversion as three SageMaker Processing jobs: run on emulated hosts here, or submitted.

    python -m jobs.sagemaker.processing local --input data/raw --instance_count 2 \\
        --output_dir runs/criteo-processing --min_count 2 --shards 2

    python -m jobs.sagemaker.processing submit --input s3://bucket/criteo/raw --instance_count 8 \\
        --output_path s3://bucket/criteo/converted --role arn:aws:iam::123456789012:role/SageMaker --dry_run

Both run the distributed Criteo conversion of `dataprep.criteo_processing`
as three Processing jobs, one after the other: `count` (N instances, the raw
TSV files `ShardedByS3Key`), `convert` (N instances, the raw files sharded
again plus every instance's counts `FullyReplicated`) and `combine` (one
instance, writes the dataset root's `metadata.json`). Each job's container
runs `python3 -m dataprep.criteo_processing <stage>`; the project's
packages reach it as a zip archive in its `code` input, on `PYTHONPATH`.
The dataset root is output `data`: `<output_dir>/data` here,
`<output_path>/<job_name>/data` on SageMaker.

`local` runs each job as SageMaker Processing would, on emulated hosts
(`jobs.sagemaker.processing_job.run_job`, root needed). The jobs' directories are
`<output_dir>/jobs/{count,convert,combine}`; where S3 would hold the
code, the counts and the parts is `<output_dir>/{code,counts,parts}`.

`submit` builds each job with the SDK's `sagemaker.processing.Processor`
(the SageMaker TensorFlow 2.14 training image, or `--image_uri`),
`ProcessingInput` and `ProcessingOutput`, uploads the code archive and runs
the jobs one after the other, each waiting for the one before;
`--dry_run` prints the three `CreateProcessingJob` requests as JSON and
contacts nothing (botocore's `Stubber`, as `jobs.sagemaker.submit` does for
training). The SDK is imported only there.
"""

import dataclasses
import os
import posixpath
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from absl import app, flags

from cli import config_flags, entry
from dataprep import criteo_processing as stages
from input_pipeline import schema
from jobs import source as source_lib
from jobs import spec as spec_lib
from jobs.local import hosts as hosts_lib
from jobs.local import processes
from jobs.sagemaker import local as sagemaker_local
from jobs.sagemaker import submit as sagemaker_submit
from jobs.sagemaker.processing_job import (
    CONTAINER_PYTHON,
    DEFAULT_MAX_RUN_S,
    DEFAULT_VOLUME_SIZE_GB,
    LOCAL_IMAGE_URI,
    Input,
    Output,
    ProcessingJobSpec,
    run_job,
)

PROGRAM = "jobs.sagemaker.processing"
COMMANDS = ("local", "submit")
LOCAL, SUBMIT = COMMANDS
CODE = "code"
ENTRYPOINT = (CONTAINER_PYTHON, "-m", "dataprep.criteo_processing")
JOBS = "jobs"
DEFAULT_INSTANCE_TYPE = "ml.m5.4xlarge"
DEFAULT_INSTANCE_COUNT = 2
IMAGE_FRAMEWORK = "tensorflow"
IMAGE_SCOPE = "training"
EXIT_FAILURE = 1
EXIT_USAGE = 2

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class ConversionConfig:
    """The distributed conversion, run here (`local`) or on SageMaker (`submit`).

    Attributes:
      command: `local` or `submit`.
      input: the raw TSV files: a local file or directory (`local`) or an
        `s3://` prefix (`submit`).
      output: a new local directory (`local`) or an `s3://` prefix under
        which `<job_name>/` goes (`submit`).
      options: the stages' options.
      instance_count: instances of the count and convert jobs.
      job_name: the jobs' common name; each job adds its stage.
      region: the AWS region.
      cpus_per_host: local: cores each host is pinned to (0: not pinned).
      timeout_s: local: each job's time limit (0: none).
      role: submit: the IAM role ARN the jobs run as.
      instance_type: submit: the instance type.
      image_uri: submit: the container image (default: the SageMaker
        TensorFlow 2.14 training image of `region`).
      max_run_s: submit: each job's time limit.
      volume_size_gb: submit: each instance's storage volume (it holds the
        instance's raw files, its counts and its converted part).
      dry_run: submit: print the requests, contact nothing.
    """

    command: str
    input: str = dataclasses.field(metadata=config_flags.metadata(
        "The raw Criteo TSV files: a file or directory (local), an s3:// prefix (submit). ShardedByS3Key: at "
        "least one file per instance."))
    output: str
    options: stages.StageOptions = stages.StageOptions()
    instance_count: int = config_flags.field(DEFAULT_INSTANCE_COUNT, "Instances of the count and convert jobs.")
    job_name: str = config_flags.field("", "The jobs' common name (default: deepfm-<time>); each adds -<stage>.")
    region: str = config_flags.field(spec_lib.DEFAULT_REGION, "AWS region.")
    cpus_per_host: int = config_flags.field(0, "local: cores each host is pinned to (0: not pinned).")
    timeout_s: float = config_flags.field(0.0, "local: each job's time limit in seconds (0: none).")
    role: Optional[str] = config_flags.field(None, "submit: IAM role ARN of the jobs.")
    instance_type: str = config_flags.field(DEFAULT_INSTANCE_TYPE, "submit: instance type.")
    image_uri: Optional[str] = config_flags.field(
        None, "submit: container image (default: SageMaker's TensorFlow 2.14 training image).")
    max_run_s: int = config_flags.field(DEFAULT_MAX_RUN_S, "submit: each job's time limit in seconds.",
                                        flag="max_run")
    volume_size_gb: int = config_flags.field(DEFAULT_VOLUME_SIZE_GB, "submit: each instance's storage volume.")
    dry_run: bool = config_flags.field(False, "submit: print the CreateProcessingJob requests as JSON; contact "
                                       "nothing.")

    def __post_init__(self):
        if self.command not in COMMANDS:
            raise ValueError("the command must be one of %s, got %r" % (", ".join(COMMANDS), self.command))
        if not self.job_name:
            object.__setattr__(self, "job_name", spec_lib.default_job_name())
        for name in self.job_names:
            if not spec_lib.JOB_NAME.match(name):
                raise ValueError("--job_name %r: each job adds -<stage>, and %r is not 1-63 letters, digits and "
                                 "hyphens starting with a letter or digit" % (self.job_name, name))
        if self.instance_count < 1:
            raise ValueError("--instance_count must be >= 1, got %r" % self.instance_count)
        output_flag = "output_dir" if self.command == LOCAL else "output_path"
        remote = [(flag, value) for flag, value in (("input", self.input), (output_flag, self.output))
                  if value.startswith(sagemaker_submit.S3_SCHEME)]
        if self.command == LOCAL:
            if remote:
                raise ValueError("local runs here: --%s must be a local path, got %r" % remote[0])
            if not os.path.exists(self.input):
                raise ValueError("--input %s: no such file or directory" % self.input)
            if self.timeout_s < 0:
                raise ValueError("--timeout_s must be >= 0, got %r" % self.timeout_s)
        else:
            if len(remote) != 2:
                raise ValueError("submit reads --input from and writes --output_path to S3: both must be s3:// "
                                 "URIs, got %r and %r" % (self.input, self.output))
            if not (self.role or "").startswith("arn:"):
                raise ValueError("--role must be an IAM role ARN (arn:aws:iam::<account>:role/<name>), got %r"
                                 % self.role)
            if self.volume_size_gb < 1:
                raise ValueError("--volume_size_gb must be >= 1, got %r" % self.volume_size_gb)

    @property
    def job_names(self) -> List[str]:
        """The jobs' names, in the order they run."""
        return ["%s-%s" % (self.job_name, stage) for stage in stages.STAGES]

    def locations(self) -> Dict[str, str]:
        """Where each input and output lives: local paths, or S3 URIs under `<output>/<job_name>/`."""
        base = self.output.rstrip("/")
        if self.command == SUBMIT:
            base = posixpath.join(base, self.job_name)
        where = {name: posixpath.join(base, name) for name in (stages.COUNTS, stages.PARTS, stages.DATA)}
        where[CODE] = posixpath.join(base, CODE, source_lib.SOURCE_ZIP)
        where[stages.RAW] = self.input
        return where


def conversion_jobs(config: ConversionConfig, image_uri: str = LOCAL_IMAGE_URI) -> List[ProcessingJobSpec]:
    """The count, convert and combine jobs, in the order they run."""
    where = config.locations()
    code = Input(CODE, where[CODE], posixpath.join(stages.INPUT_DIR, CODE))
    environment = {"PYTHONPATH": posixpath.join(code.destination, source_lib.SOURCE_ZIP)}
    jobs = []
    for stage, job_name in zip(stages.STAGES, config.job_names):
        inputs = (code,) + tuple(
            Input(name, where[name], posixpath.join(stages.INPUT_DIR, name),
                  spec_lib.SHARDED_BY_S3_KEY if name == stages.RAW else spec_lib.FULLY_REPLICATED)
            for name in stages.STAGE_INPUTS[stage])
        outputs = tuple(Output(name, posixpath.join(stages.OUTPUT_DIR, name), where[name])
                        for name in stages.STAGE_OUTPUTS[stage])
        jobs.append(ProcessingJobSpec(
            job_name=job_name, entrypoint=ENTRYPOINT,
            arguments=tuple(config.options.arguments(stage)), environment=environment, inputs=inputs,
            outputs=outputs, instance_count=1 if stage == stages.COMBINE else config.instance_count,
            instance_type=config.instance_type if config.command == SUBMIT else spec_lib.LOCAL_INSTANCE_TYPE,
            image_uri=image_uri, region=config.region, max_runtime_s=config.max_run_s,
            volume_size_gb=config.volume_size_gb))
    return jobs


def run_conversion(config: ConversionConfig, python: str = sys.executable) -> str:
    """Runs the three jobs here, one after the other; returns the dataset root.

    Raises:
      FileExistsError: the output directory is not empty.
      As `run_job`.
    """
    output = os.path.abspath(config.output)
    if os.path.isdir(output) and os.listdir(output):
        raise FileExistsError("--output_dir %s is not empty: use a new directory" % config.output)
    where = config.locations()
    os.makedirs(os.path.dirname(os.path.abspath(where[CODE])))
    source_lib.write_source_zip(where[CODE])
    for spec, stage in zip(conversion_jobs(config), stages.STAGES):
        start = time.monotonic()
        collected = run_job(spec, os.path.join(output, JOBS, stage), cpus_per_host=config.cpus_per_host,
                            timeout_s=config.timeout_s, python=python)
        print("job %s: %d instance(s) in %.1fs; collected %s" % (
            spec.job_name, spec.instance_count, time.monotonic() - start,
            ", ".join("%s: %d file(s)" % item for item in collected.items())), flush=True)
    return os.path.abspath(where[stages.DATA])


def build_processor(spec: ProcessingJobSpec, role: str, session):
    """The SDK's `Processor` of the job, bound to `session`."""
    from sagemaker import processing
    return processing.Processor(
        role=role, image_uri=spec.image_uri, instance_count=spec.instance_count, instance_type=spec.instance_type,
        entrypoint=list(spec.entrypoint), volume_size_in_gb=spec.volume_size_gb,
        max_runtime_in_seconds=spec.max_runtime_s, env=dict(spec.environment), sagemaker_session=session,
        base_job_name=spec_lib.JOB_NAME_PREFIX)


def sdk_run_arguments(spec: ProcessingJobSpec) -> dict:
    """The `Processor.run` arguments of the job: its `ProcessingInput`s, `ProcessingOutput`s and arguments."""
    from sagemaker import processing
    return dict(
        inputs=[processing.ProcessingInput(source=item.source, destination=item.destination, input_name=item.name,
                                           s3_data_distribution_type=item.distribution) for item in spec.inputs],
        outputs=[processing.ProcessingOutput(source=item.source, destination=item.destination,
                                             output_name=item.name) for item in spec.outputs],
        arguments=list(spec.arguments), job_name=spec.job_name)


def submit_conversion(config: ConversionConfig) -> List[dict]:
    """Submits the three jobs, each after the one before has completed (dry run: only builds them).

    Returns:
      The `CreateProcessingJob` requests as the SDK sent them (dry run), or
      each job's name.

    Raises:
      ImportError: the SDK is not installed.
      Errors of the SDK and AWS on a real submit (a failed job included).
    """
    if config.role is None:
        raise ValueError("submit needs --role (the IAM role the jobs run as)")
    role = config.role
    sagemaker_submit.import_sdk()
    from sagemaker import image_uris
    image_uri = config.image_uri or image_uris.retrieve(
        IMAGE_FRAMEWORK, region=config.region, version=sagemaker_submit.FRAMEWORK_VERSION,
        py_version=sagemaker_submit.PY_VERSION, instance_type=config.instance_type, image_scope=IMAGE_SCOPE)
    jobs = conversion_jobs(config, image_uri)
    sdk = sagemaker_submit.open_session(
        config.region, sagemaker_submit.split_s3(config.output)[0], "CreateProcessingJob", config.dry_run,
        [{"ProcessingJobArn": sagemaker_submit.dry_run_arn(config.region, "processing-job", spec.job_name)}
         for spec in jobs])
    with tempfile.TemporaryDirectory() as tmp:
        sdk.upload(source_lib.write_source_zip(os.path.join(tmp, source_lib.SOURCE_ZIP)),
                   config.locations()[CODE])
    for spec in jobs:
        build_processor(spec, role, sdk.session).run(wait=not config.dry_run, logs=False,
                                                            **sdk_run_arguments(spec))
    sdk.finish()
    return sdk.requests if config.dry_run else [{"ProcessingJobName": spec.job_name} for spec in jobs]


# ---------------------------------------------------------------------------
# Command line.


@dataclasses.dataclass(frozen=True)
class OutputFlags:
    """Where the conversion writes, one flag per command (`ConversionConfig.output` holds the one given)."""

    output_dir: Optional[str] = config_flags.field(
        None, "local: a new directory; the dataset root is its data/.")
    output_path: Optional[str] = config_flags.field(
        None, "submit: s3:// prefix; the jobs write under <output_path>/<job_name>/.")


def define_flags() -> None:
    """The flags of both commands (`local` and `submit` each ignore the other's)."""
    config_flags.define_flags([ConversionConfig, OutputFlags, stages.StageOptions])


def config_from_flags(command: str, f=FLAGS) -> ConversionConfig:
    """The `ConversionConfig` of the parsed flags.

    Raises:
      ValueError: a missing or bad flag, named.
    """
    needed = ("input", "output_dir") if command == LOCAL else ("input", "output_path", "role")
    missing = [name for name in needed if not getattr(f, name)]
    if missing:
        raise ValueError("%s needs --%s" % (command, ", --".join(missing)))
    outputs = OutputFlags(**config_flags.values(OutputFlags, f))
    return ConversionConfig(
        command=command, output=(outputs.output_dir if command == LOCAL else outputs.output_path) or "",
        options=stages.StageOptions(**config_flags.values(stages.StageOptions, f)),
        **config_flags.values(ConversionConfig, f))


def run_local(config: ConversionConfig) -> int:
    """Runs the conversion here; returns its exit code."""
    try:
        root = run_conversion(config)
    except (ValueError, FileExistsError, hosts_lib.HostSetupError) as e:
        print("%s local: %s" % (PROGRAM, e), file=sys.stderr)
        return EXIT_USAGE
    except (sagemaker_local.JobFailedError, TimeoutError) as e:
        print("%s local: %s failed: %s" % (PROGRAM, config.job_name, e), file=sys.stderr)
        return getattr(e, "returncode", EXIT_FAILURE) or EXIT_FAILURE
    except processes.Terminated as e:
        print("%s local: stopped by %s; every host was stopped" % (PROGRAM, e), file=sys.stderr)
        return processes.SIGNAL_EXIT_BASE + e.signum
    print("conversion %s completed: dataset root %s\n%s" % (config.job_name, root, dataset_summary(root)))
    return 0


def dataset_summary(root: str) -> str:
    """The dataset root's splits, shards and source, for the console."""
    metadata = schema.DatasetMetadata.read(root)
    lines = ["  feature_size %d" % metadata.feature_size]
    lines += ["  %-10s %8d rows in %d shard(s)" % (name, info.rows, len(info.shards))
              for name, info in metadata.splits.items()]
    lines.append("  source: %s" % metadata.source)
    return "\n".join(lines)


def main(argv: Sequence[str]) -> None:
    """Runs the conversion here (`local`) or submits it (`submit`) with the parsed flags."""
    if len(argv) != 2 or argv[1] not in COMMANDS:
        raise app.UsageError("expected one command, one of %s; got %r" % (", ".join(COMMANDS), list(argv[1:])))
    try:
        config = config_from_flags(argv[1])
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    if config.command == LOCAL:
        sys.exit(run_local(config))
    print(sagemaker_submit.request_json(submit_conversion(config)))


def run() -> None:
    """Console entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)


if __name__ == "__main__":
    run()
