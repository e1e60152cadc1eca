"""Submits a `JobSpec` as a SageMaker training job with the SageMaker Python SDK (v2).

The job is built with the SDK's own `sagemaker.tensorflow.TensorFlow`
estimator (TensorFlow 2.14, py310), its `distribution` for parameter servers
or MPI, and `TrainingInput` channels (File or Pipe mode, `FullyReplicated`
or `ShardedByS3Key`). The project is shipped as the source tarball of
`jobs.source.write_source_tarball`, uploaded to
`<output_path>/<job_name>/source/sourcedir.tar.gz` and given to the SDK as
an `s3://` `source_dir`, so the SDK itself uploads nothing.

The job keeps its checkpoints at `<output_path>/<job_name>/checkpoints`
unless told otherwise (`checkpoint_s3_uri`, or none with `spec.checkpoints`
off), and carries the metric definitions of `jobs.sagemaker.metrics`, so
that the SageMaker console and CloudWatch plot its loss, examples/sec and
validation AUC and logloss. With a `TuningConfig` the same job becomes the
training job of a hyperparameter tuning job: the SDK's
`HyperparameterTuner`, maximizing the validation AUC over the given ranges.

A dry run (`dry_run=True`) contacts nothing and needs no credentials: the
SDK's SageMaker client gets botocore's `Stubber`, which checks the
`CreateTrainingJob` request against the API model and answers it, and the
request (`CreateTrainingJob`, or `CreateHyperParameterTuningJob` when
tuning) is captured from the client's `provide-client-params` event; the
tarball is written locally instead of uploaded. The SDK's telemetry is
switched off through its own configuration.

`open_session` (the SDK session, the dry run's stub and the captured
requests) is shared with the Processing jobs of `jobs.sagemaker.processing`.

The SDK is an optional dependency (`pip install 'deepfm-strategies[sdk]'`):
it is imported only here (and by `jobs.sagemaker.processing` through
`import_sdk`), and only when a job is submitted.
"""

import contextlib
import dataclasses
import importlib
import json
import os
import re
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from cli import config_flags
from jobs import source as source_lib
from jobs import spec as spec_lib
from jobs.sagemaker import container as container_lib
from jobs.sagemaker import metrics as sagemaker_metrics
from jobs.sagemaker import sdk_config

FRAMEWORK_VERSION = "2.14"
PY_VERSION = "py310"
DEFAULT_INSTANCE_TYPE = "ml.c5.xlarge"
DEFAULT_MAX_RUN_S = 24 * 60 * 60
FAKE_CREDENTIALS = ("AKIADRYRUNDRYRUNDRYR", "dry-run-secret-key-not-used-for-anything")
DRY_RUN_ACCOUNT = "123456789012"
SDK_CONFIG = {"SchemaVersion": "1.0",
              "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}
S3_SCHEME = "s3://"
INSTALL_HINT = "the SageMaker Python SDK v2 is needed to submit jobs: pip install 'sagemaker>=2.200,<3'"
CHECKPOINTS_PREFIX = "checkpoints"
TRAINING_JOB_OPERATION = "CreateTrainingJob"
TUNING_JOB_OPERATION = "CreateHyperParameterTuningJob"
# Ranges of a tuning job: NAME=MIN..MAX (integers or numbers), optionally :log; NAME=A|B|C (categories).
RANGE_SEPARATOR = ".."
CATEGORY_SEPARATOR = "|"
LOG_SUFFIX = ":log"
INTEGER, CONTINUOUS, CATEGORICAL = "Integer", "Continuous", "Categorical"
AUTO_SCALING, LOG_SCALING = "Auto", "Logarithmic"
MAX_CATEGORIES = 30
DEFAULT_MAX_JOBS = 10
DEFAULT_MAX_PARALLEL_JOBS = 2
TUNING_STRATEGY = "Bayesian"
TUNING_JOB_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,31}$")


@dataclasses.dataclass(frozen=True)
class ParameterRange:
    """One hyperparameter a tuning job searches.

    Attributes:
      name: the hyperparameter.
      kind: `Integer`, `Continuous` or `Categorical`.
      values: (min, max) of an integer or continuous range, or the categories.
      scaling: `Auto` or `Logarithmic` (integer and continuous ranges).
    """

    name: str
    kind: str
    values: Tuple[str, ...]
    scaling: str = AUTO_SCALING

    def __post_init__(self):
        where = "--tune %s" % self.name
        if self.kind == CATEGORICAL:
            if not 1 <= len(self.values) <= MAX_CATEGORIES or any(not value for value in self.values):
                raise ValueError("%s: 1 to %d non-empty categories, got %r" % (where, MAX_CATEGORIES, self.values))
            if self.scaling != AUTO_SCALING:
                raise ValueError("%s: categories have no scaling" % where)
            return
        if self.kind not in (INTEGER, CONTINUOUS) or len(self.values) != 2:
            raise ValueError("%s: expected MIN..MAX or A|B|..., got %r" % (where, self.values))
        low, high = (float(value) for value in self.values)
        if low >= high:
            raise ValueError("%s: MIN must be below MAX, got %s..%s" % ((where,) + self.values))
        if self.scaling == LOG_SCALING and low <= 0:
            raise ValueError("%s: a logarithmic range must be above 0, got %s..%s" % ((where,) + self.values))

    @classmethod
    def parse(cls, text: str) -> "ParameterRange":
        """`NAME=MIN..MAX[:log]` (integers: an integer range; else continuous) or `NAME=A|B|...`.

        Raises:
          ValueError: the text is none of these; the message names it.
        """
        name, separator, spec = text.partition("=")
        if not separator or not name or not spec:
            raise ValueError("--tune %r must be NAME=MIN..MAX[:log] or NAME=A|B|..." % text)
        if RANGE_SEPARATOR not in spec:
            return cls(name, CATEGORICAL, tuple(spec.split(CATEGORY_SEPARATOR)))
        scaling = AUTO_SCALING
        if spec.endswith(LOG_SUFFIX):
            spec, scaling = spec[:-len(LOG_SUFFIX)], LOG_SCALING
        low, _, high = spec.partition(RANGE_SEPARATOR)
        try:
            kind = INTEGER if all(_is_integer(value) for value in (low, high)) else CONTINUOUS
            float(low), float(high)
        except ValueError as e:
            raise ValueError("--tune %r: MIN and MAX must be numbers" % text) from e
        return cls(name, kind, (low, high), scaling)

    def sdk_parameter(self, tuner_module):
        """The SDK's `IntegerParameter`, `ContinuousParameter` or `CategoricalParameter`."""
        if self.kind == CATEGORICAL:
            return tuner_module.CategoricalParameter(list(self.values))
        parameter = tuner_module.IntegerParameter if self.kind == INTEGER else tuner_module.ContinuousParameter
        convert = int if self.kind == INTEGER else float
        return parameter(convert(self.values[0]), convert(self.values[1]), scaling_type=self.scaling)


def _is_integer(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class TuningConfig:
    """A hyperparameter tuning job around the training job: the objective is the validation AUC, maximized.

    Attributes:
      ranges: the hyperparameters searched.
      max_jobs: training jobs in all.
      max_parallel_jobs: training jobs at a time.
    """

    ranges: Tuple[ParameterRange, ...] = dataclasses.field(metadata=config_flags.metadata(
        "submit: a hyperparameter a tuning job searches, maximizing the validation AUC: NAME=MIN..MAX (integers or "
        "numbers; :log for a logarithmic scale) or NAME=A|B|C; repeatable.", flag="tune", repeated=True,
        parse=ParameterRange.parse))
    max_jobs: int = config_flags.field(DEFAULT_MAX_JOBS, "submit --tune: training jobs in all.",
                                       flag="tuning_max_jobs")
    max_parallel_jobs: int = config_flags.field(DEFAULT_MAX_PARALLEL_JOBS, "submit --tune: training jobs at a time.",
                                                flag="tuning_max_parallel_jobs")

    def __post_init__(self):
        if not self.ranges:
            raise ValueError("a tuning job needs at least one --tune range")
        names = [r.name for r in self.ranges]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError("--tune %s given more than once" % ", ".join(duplicates))
        if self.max_jobs < 1:
            raise ValueError("--tuning_max_jobs must be >= 1, got %r" % self.max_jobs)
        if not 1 <= self.max_parallel_jobs <= self.max_jobs:
            raise ValueError("--tuning_max_parallel_jobs must be in [1, --tuning_max_jobs %d], got %r"
                             % (self.max_jobs, self.max_parallel_jobs))

    @property
    def names(self) -> List[str]:
        return [r.name for r in self.ranges]


@dataclasses.dataclass(frozen=True)
class SubmitConfig:
    """Where and how the job runs on SageMaker.

    Attributes:
      spec: the job (channel URIs are `s3://` prefixes).
      role: the IAM role ARN the job runs as.
      output_path: `s3://` prefix for the model artifacts and the source.
      instance_type: e.g. `ml.c5.18xlarge`.
      checkpoint_s3_uri: `s3://` prefix synced with `/opt/ml/checkpoints`
        (needed for managed spot training to resume); default
        `<output_path>/<job_name>/checkpoints` when `spec.checkpoints`
        (`checkpoint_uri`).
      use_spot: managed spot training.
      max_run_s: the job's time limit.
      max_wait_s: spot: how long to wait for capacity plus run (default
        `max_run_s`).
      dry_run: build the request, print it, contact nothing.
      tuning: make the job the training job of a hyperparameter tuning job.
    """

    spec: spec_lib.JobSpec
    role: str = dataclasses.field(metadata=config_flags.metadata("submit: IAM role ARN of the job."))
    output_path: str = dataclasses.field(metadata=config_flags.metadata(
        "submit: s3:// prefix for the model artifacts and the source."))
    instance_type: str = config_flags.field(DEFAULT_INSTANCE_TYPE, "submit: instance type.")
    checkpoint_s3_uri: Optional[str] = config_flags.field(
        None, "submit: s3:// prefix synced with /opt/ml/checkpoints (default: <output_path>/<job_name>/checkpoints).")
    use_spot: bool = config_flags.field(False, "submit: managed spot training.")
    max_run_s: int = config_flags.field(DEFAULT_MAX_RUN_S, "submit: the job's time limit in seconds.",
                                        flag="max_run")
    max_wait_s: Optional[int] = config_flags.field(
        None, "submit, spot: seconds to wait for capacity plus run.", flag="max_wait")
    dry_run: bool = config_flags.field(
        False, "submit: print the CreateTrainingJob (or CreateHyperParameterTuningJob) request as JSON; contact "
        "nothing.")
    tuning: Optional[TuningConfig] = None

    def __post_init__(self):
        if not self.role.startswith("arn:"):
            raise ValueError("--role must be an IAM role ARN (arn:aws:iam::<account>:role/<name>), got %r"
                             % self.role)
        for flag, uri in (("output_path", self.output_path), ("checkpoint_s3_uri", self.checkpoint_s3_uri)):
            if uri is not None and not uri.startswith(S3_SCHEME):
                raise ValueError("--%s must be an s3:// URI, got %r" % (flag, uri))
        for channel in self.spec.channels:
            if not channel.uri.startswith(S3_SCHEME):
                raise ValueError("--channel %s=%s: a submitted job reads its channels from S3 (s3://...)"
                                 % (channel.name, channel.uri))
        if self.checkpoint_s3_uri and not self.spec.checkpoints:
            raise ValueError("--checkpoint_s3_uri %s and --nocheckpoints: choose one" % self.checkpoint_s3_uri)
        if self.tuning is not None:
            self._check_tuning()
        if self.use_spot and not self.checkpoint_uri:
            raise ValueError("--use_spot needs checkpoints: an interrupted spot job resumes from them (drop "
                             "--nocheckpoints)")
        if self.max_run_s < 1:
            raise ValueError("--max_run must be >= 1 second, got %r" % self.max_run_s)
        if self.max_wait_s is not None and not self.use_spot:
            raise ValueError("--max_wait applies to spot jobs only: add --use_spot")
        if self.max_wait_s is not None and self.max_wait_s < self.max_run_s:
            raise ValueError("--max_wait %d must be >= --max_run %d" % (self.max_wait_s, self.max_run_s))

    def _check_tuning(self) -> None:
        assert self.tuning is not None, "checked only with a tuning job"
        if not TUNING_JOB_NAME.match(self.spec.job_name):
            raise ValueError("--tune: --job_name %r names the tuning job, which takes 1-32 letters, digits and "
                             "hyphens" % self.spec.job_name)
        both = sorted(set(self.tuning.names) & set(self.spec.hyperparameters))
        if both:
            raise ValueError("%s: given both as a hyperparameter and as a --tune range" % ", ".join(both))
        if self.checkpoint_s3_uri or self.use_spot:
            raise ValueError("--tune with %s: the tuning job's training jobs would share one checkpoint location "
                             "and resume from each other's checkpoints; tuning jobs keep none"
                             % ("--checkpoint_s3_uri" if self.checkpoint_s3_uri else "--use_spot, which needs one"))

    @property
    def source_uri(self) -> str:
        """Where the source tarball goes."""
        return "%s/%s/source/%s" % (self.output_path.rstrip("/"), self.spec.job_name,
                                    source_lib.SOURCE_TARBALL)

    @property
    def checkpoint_uri(self) -> Optional[str]:
        """The job's checkpoint location: the given one, else `<output_path>/<job_name>/checkpoints`.

        None without checkpoints (`spec.checkpoints` off) and for the training
        jobs of a tuning job.
        """
        if not self.spec.checkpoints or self.tuning is not None:
            return None
        return self.checkpoint_s3_uri or "%s/%s/%s" % (self.output_path.rstrip("/"), self.spec.job_name,
                                                        CHECKPOINTS_PREFIX)


def import_sdk():
    """The SDK's modules `(boto3, sagemaker, sagemaker.inputs, sagemaker.tensorflow)`, imported now.

    `sagemaker.tuner` is imported too (`sagemaker.tuner` of the second), and
    the SDK's lookups of its defaults validate each configuration once
    (`jobs.sagemaker.sdk_config`).

    Raises:
      ImportError: the SDK is not installed; the message says how to install it.
    """
    # The v2 line warns at import that v3 exists; v3 has no framework estimators.
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    try:
        # The SDK's configuration logger writes to the stdout it sees at import:
        # keep stdout for the request.
        with contextlib.redirect_stdout(sys.stderr):
            import boto3
            import sagemaker
            from sagemaker import inputs, tensorflow
            importlib.import_module("sagemaker.tuner")  # `sagemaker.tuner`, read by build_tuner
    except ImportError as e:
        raise ImportError("%s (%s)" % (INSTALL_HINT, e)) from e
    sdk_config.install()
    return boto3, sagemaker, inputs, tensorflow


def split_s3(uri: str):
    """`s3://bucket/key` as `(bucket, key)`."""
    bucket, _, key = uri[len(S3_SCHEME):].partition("/")
    return bucket, key


def sdk_distribution(spec: spec_lib.JobSpec) -> Optional[Dict[str, dict]]:
    """The `distribution` argument of the SDK's `TensorFlow` estimator for the job's distribution."""
    if spec.distribution == spec_lib.DISTRIBUTION_PS:
        return {"parameter_server": {"enabled": True}}
    if spec.distribution == spec_lib.DISTRIBUTION_MPI:
        return {"mpi": {"enabled": True, "processes_per_host": spec.processes_per_host,
                        "custom_mpi_options": spec.mpi_options()}}
    return None


def build_estimator(config: SubmitConfig, session):
    """The SDK's `TensorFlow` estimator of the job, bound to `session`."""
    _, _, _, tensorflow = import_sdk()
    spec = config.spec
    tuned = set(config.tuning.names) if config.tuning else set()
    kwargs = dict(
        entry_point=spec.entry_point,
        source_dir=os.path.dirname(config.source_uri) + "/" + source_lib.SOURCE_TARBALL,
        role=config.role,
        instance_count=spec.instance_count,
        instance_type=config.instance_type,
        framework_version=FRAMEWORK_VERSION,
        py_version=PY_VERSION,
        input_mode=spec.input_mode,
        output_path=config.output_path,
        hyperparameters={name: value for name, value in spec.hyperparameters.items() if name not in tuned},
        metric_definitions=[dict(definition) for definition in sagemaker_metrics.METRIC_DEFINITIONS],
        max_run=config.max_run_s,
        sagemaker_session=session,
        base_job_name=spec_lib.JOB_NAME_PREFIX,
        model_dir=container_lib.CHECKPOINT_LOCAL_PATH if config.checkpoint_uri else False,
        disable_profiler=True,
        debugger_hook_config=False,
    )
    if sdk_distribution(spec):
        kwargs["distribution"] = sdk_distribution(spec)
    if config.checkpoint_uri:
        kwargs.update(checkpoint_s3_uri=config.checkpoint_uri,
                      checkpoint_local_path=container_lib.CHECKPOINT_LOCAL_PATH)
    if config.use_spot:
        kwargs.update(use_spot_instances=True, max_wait=config.max_wait_s or config.max_run_s)
    return tensorflow.TensorFlow(**kwargs)


def build_tuner(config: SubmitConfig, estimator):
    """The SDK's `HyperparameterTuner` of `config.tuning` around `estimator`."""
    tuner_module = import_sdk()[1].tuner
    tuning = config.tuning
    if tuning is None:
        raise ValueError("a tuner needs a tuning job (--tune)")
    return tuner_module.HyperparameterTuner(
        estimator, objective_metric_name=sagemaker_metrics.OBJECTIVE_METRIC,
        hyperparameter_ranges={r.name: r.sdk_parameter(tuner_module) for r in tuning.ranges},
        metric_definitions=[dict(definition) for definition in sagemaker_metrics.METRIC_DEFINITIONS],
        strategy=TUNING_STRATEGY, objective_type=sagemaker_metrics.OBJECTIVE_TYPE, max_jobs=tuning.max_jobs,
        max_parallel_jobs=tuning.max_parallel_jobs, base_tuning_job_name=spec_lib.JOB_NAME_PREFIX)


def training_inputs(config: SubmitConfig) -> Dict[str, object]:
    """The `fit` inputs: one `TrainingInput` per channel."""
    _, _, inputs, _ = import_sdk()
    return {channel.name: inputs.TrainingInput(channel.uri, distribution=channel.distribution,
                                               input_mode=config.spec.channel_mode(channel))
            for channel in config.spec.channels}


@dataclasses.dataclass
class SdkSession:
    """An SDK session, and in a dry run the stub that answers its requests.

    Attributes:
      session: the `sagemaker.Session`.
      boto_session: its `boto3.Session`.
      requests: every request of the watched operation the SDK made, as
        sent, in order.
      stubber: botocore's `Stubber` on the SageMaker client (dry run), else
        None.
    """

    session: Any
    boto_session: Any
    requests: List[dict]
    stubber: Optional[Any] = None

    def upload(self, path: str, uri: str) -> None:
        """Uploads a local file to `s3://bucket/key` (not in a dry run)."""
        if self.stubber is None:
            bucket, key = split_s3(uri)
            self.boto_session.client("s3").upload_file(path, bucket, key)

    def finish(self) -> None:
        """Dry run: checks that every stubbed answer was asked for."""
        if self.stubber is not None:
            self.stubber.assert_no_pending_responses()


def open_session(region: str, default_bucket: str, operation: str, dry_run: bool,
                 dry_run_responses: Sequence[dict] = ()) -> SdkSession:
    """An SDK session whose `operation` requests (e.g. `CreateTrainingJob`) are captured.

    A dry run uses fake credentials and botocore's `Stubber`, which checks
    each request against the API model and answers it with the next of
    `dry_run_responses`; nothing is contacted. The SDK's telemetry is off.

    Args:
      region: the AWS region.
      default_bucket: the session's default bucket (so that the SDK looks
        for none).
      operation: the API operation to capture.
      dry_run: stub the SageMaker client instead of calling AWS.
      dry_run_responses: dry run: one answer per expected `operation` call.
    """
    boto3, sagemaker, _, _ = import_sdk()
    if dry_run:
        boto_session = boto3.Session(aws_access_key_id=FAKE_CREDENTIALS[0],
                                     aws_secret_access_key=FAKE_CREDENTIALS[1], region_name=region)
    else:
        boto_session = boto3.Session(region_name=region)
    client = boto_session.client("sagemaker")
    requests: List[dict] = []

    def capture(params, **kwargs):
        del kwargs
        requests.append(dict(params))
    client.meta.events.register("provide-client-params.sagemaker.%s" % operation, capture)
    stubber = None
    if dry_run:
        from botocore import xform_name
        from botocore.stub import Stubber
        stubber = Stubber(client)
        for response in dry_run_responses:
            # botocore validates the request against the API model before the stub answers it.
            stubber.add_response(xform_name(operation), response)
        stubber.activate()
    session = sagemaker.Session(boto_session=boto_session, sagemaker_client=client,
                                sagemaker_config=SDK_CONFIG, default_bucket=default_bucket)
    return SdkSession(session=session, boto_session=boto_session, requests=requests, stubber=stubber)


def dry_run_arn(region: str, resource: str, name: str) -> str:
    """The ARN a dry run's stub answers with, e.g. for `training-job/<name>`."""
    return "arn:aws:sagemaker:%s:%s:%s/%s" % (region, DRY_RUN_ACCOUNT, resource, name)


def submit(config: SubmitConfig, region: Optional[str] = None) -> dict:
    """Submits the job or its tuning job (or, with `dry_run`, only builds the request).

    Returns:
      The `CreateTrainingJob` (or `CreateHyperParameterTuningJob`) request
      as the SDK sent it (dry run), or the job's name.

    Raises:
      ImportError: the SDK is not installed.
      botocore.exceptions.ClientError and others from AWS on a real submit.
    """
    region = region or config.spec.region
    name = config.spec.job_name
    if config.tuning is None:
        operation, response = TRAINING_JOB_OPERATION, {"TrainingJobArn": dry_run_arn(region, "training-job", name)}
    else:
        operation, response = TUNING_JOB_OPERATION, {
            "HyperParameterTuningJobArn": dry_run_arn(region, "hyper-parameter-tuning-job", name)}
    sdk = open_session(region, split_s3(config.output_path)[0], operation, config.dry_run, [response])
    with tempfile.TemporaryDirectory() as tmp:
        tarball = source_lib.write_source_tarball(os.path.join(tmp, source_lib.SOURCE_TARBALL),
                                                     source_dir=config.spec.source_dir)
        sdk.upload(tarball, config.source_uri)
    estimator = build_estimator(config, sdk.session)
    if config.tuning is None:
        estimator.fit(training_inputs(config), job_name=name, wait=False, logs=False)
    else:
        build_tuner(config, estimator).fit(training_inputs(config), job_name=name, wait=False)
    if config.dry_run:
        sdk.finish()
        return sdk.requests[-1]
    if config.tuning is None:
        return {"TrainingJobName": estimator.latest_training_job.job_name}
    return {"HyperParameterTuningJobName": name}


def request_json(request: object) -> str:
    """The captured request (or requests) as indented JSON (datetimes and the like as strings)."""
    return json.dumps(request, indent=1, sort_keys=True, default=str)
