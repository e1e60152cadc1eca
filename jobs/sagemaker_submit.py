"""Submits a `JobSpec` as a SageMaker training job with the SageMaker Python SDK (v2).

The job is built with the SDK's own `sagemaker.tensorflow.TensorFlow`
estimator (TensorFlow 2.14, py310), its `distribution` for parameter servers
or MPI, and `TrainingInput` channels (File or Pipe mode, `FullyReplicated`
or `ShardedByS3Key`). The project is shipped as the source tarball of
`sagemaker_job.write_source_tarball`, uploaded to
`<output_path>/<job_name>/source/sourcedir.tar.gz` and given to the SDK as
an `s3://` `source_dir`, so the SDK itself uploads nothing.

A dry run (`dry_run=True`) contacts nothing and needs no credentials: the
SDK's SageMaker client gets botocore's `Stubber`, which checks the
`CreateTrainingJob` request against the API model and answers it, and the
request is captured from the client's `provide-client-params` event; the
tarball is written locally instead of uploaded. The SDK's telemetry is
switched off through its own configuration.

`open_session` (the SDK session, the dry run's stub and the captured
requests) is shared with the Processing jobs of `jobs.sagemaker_processing`.

The SDK is an optional dependency (`pip install 'deepfm-strategies[sdk]'`):
it is imported only here (and by `jobs.sagemaker_processing` through
`import_sdk`), and only when a job is submitted.
"""

import contextlib
import dataclasses
import json
import os
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

from jobs import sagemaker_job

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


@dataclasses.dataclass(frozen=True)
class SubmitConfig:
    """Where and how the job runs on SageMaker.

    Attributes:
      spec: the job (channel URIs are `s3://` prefixes).
      role: the IAM role ARN the job runs as.
      output_path: `s3://` prefix for the model artifacts and the source.
      instance_type: e.g. `ml.c5.18xlarge`.
      checkpoint_s3_uri: `s3://` prefix synced with `/opt/ml/checkpoints`
        (needed for managed spot training to resume).
      use_spot: managed spot training.
      max_run_s: the job's time limit.
      max_wait_s: spot: how long to wait for capacity plus run (default
        `max_run_s`).
      dry_run: build the request, print it, contact nothing.
    """

    spec: sagemaker_job.JobSpec
    role: str
    output_path: str
    instance_type: str = DEFAULT_INSTANCE_TYPE
    checkpoint_s3_uri: Optional[str] = None
    use_spot: bool = False
    max_run_s: int = DEFAULT_MAX_RUN_S
    max_wait_s: Optional[int] = None
    dry_run: bool = False

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
        if self.use_spot and not self.checkpoint_s3_uri:
            raise ValueError("--use_spot needs --checkpoint_s3_uri: an interrupted spot job resumes from its "
                             "checkpoints, which SageMaker keeps there")
        if self.spec.checkpoints and not self.checkpoint_s3_uri:
            raise ValueError("the job keeps its checkpoints in /opt/ml/checkpoints: give --checkpoint_s3_uri "
                             "so that SageMaker keeps them (or --nocheckpoints)")
        if self.max_run_s < 1:
            raise ValueError("--max_run must be >= 1 second, got %r" % self.max_run_s)
        if self.max_wait_s is not None and not self.use_spot:
            raise ValueError("--max_wait applies to spot jobs only: add --use_spot")
        if self.max_wait_s is not None and self.max_wait_s < self.max_run_s:
            raise ValueError("--max_wait %d must be >= --max_run %d" % (self.max_wait_s, self.max_run_s))

    @property
    def source_uri(self) -> str:
        """Where the source tarball goes."""
        return "%s/%s/source/%s" % (self.output_path.rstrip("/"), self.spec.job_name,
                                    sagemaker_job.SOURCE_TARBALL)


def import_sdk():
    """The SDK's modules `(boto3, sagemaker, sagemaker.inputs, sagemaker.tensorflow)`, imported now.

    Raises:
      ImportError: the SDK is not installed; the message says how to install it.
    """
    # The v2 line warns at import that v3 exists; v3 has no framework estimators.
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    try:
        # The SDK's configuration logger writes to the stdout it sees at import:
        # keep stdout for the request.
        with contextlib.redirect_stdout(sys.stderr):
            import boto3  # pylint: disable=import-outside-toplevel
            import sagemaker  # pylint: disable=import-outside-toplevel
            from sagemaker import inputs, tensorflow  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise ImportError("%s (%s)" % (INSTALL_HINT, e)) from e
    return boto3, sagemaker, inputs, tensorflow


def split_s3(uri: str):
    """`s3://bucket/key` as `(bucket, key)`."""
    bucket, _, key = uri[len(S3_SCHEME):].partition("/")
    return bucket, key


def build_estimator(config: SubmitConfig, session):
    """The SDK's `TensorFlow` estimator of the job, bound to `session`."""
    _, _, _, tensorflow = import_sdk()
    spec = config.spec
    kwargs = dict(
        entry_point=sagemaker_job.ENTRY_POINT,
        source_dir=os.path.dirname(config.source_uri) + "/" + sagemaker_job.SOURCE_TARBALL,
        role=config.role,
        instance_count=spec.instance_count,
        instance_type=config.instance_type,
        framework_version=FRAMEWORK_VERSION,
        py_version=PY_VERSION,
        input_mode=spec.input_mode,
        output_path=config.output_path,
        hyperparameters=dict(spec.hyperparameters),
        max_run=config.max_run_s,
        sagemaker_session=session,
        base_job_name=sagemaker_job.JOB_NAME_PREFIX,
        model_dir=sagemaker_job.model_dir_for(spec) or False,
        disable_profiler=True,
        debugger_hook_config=False,
    )
    if spec.sdk_distribution():
        kwargs["distribution"] = spec.sdk_distribution()
    if config.checkpoint_s3_uri:
        kwargs.update(checkpoint_s3_uri=config.checkpoint_s3_uri,
                      checkpoint_local_path=sagemaker_job.CHECKPOINT_LOCAL_PATH)
    if config.use_spot:
        kwargs.update(use_spot_instances=True, max_wait=config.max_wait_s or config.max_run_s)
    return tensorflow.TensorFlow(**kwargs)


def training_inputs(config: SubmitConfig) -> Dict[str, object]:
    """The `fit` inputs: one `TrainingInput` per channel."""
    _, _, inputs, _ = import_sdk()
    return {channel.name: inputs.TrainingInput(channel.uri, distribution=channel.distribution,
                                               input_mode=config.spec.input_mode)
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

    session: object
    boto_session: object
    requests: List[dict]
    stubber: Optional[object] = None

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
        from botocore import xform_name  # pylint: disable=import-outside-toplevel
        from botocore.stub import Stubber  # pylint: disable=import-outside-toplevel
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
    """Submits the job (or, with `dry_run`, only builds its request).

    Returns:
      The `CreateTrainingJob` request as the SDK sent it (dry run) or the
      job's name and ARN.

    Raises:
      ImportError: the SDK is not installed.
      botocore.exceptions.ClientError and others from AWS on a real submit.
    """
    region = region or config.spec.region
    sdk = open_session(region, split_s3(config.output_path)[0], "CreateTrainingJob", config.dry_run,
                       [{"TrainingJobArn": dry_run_arn(region, "training-job", config.spec.job_name)}])
    with tempfile.TemporaryDirectory() as tmp:
        tarball = sagemaker_job.write_source_tarball(os.path.join(tmp, sagemaker_job.SOURCE_TARBALL))
        sdk.upload(tarball, config.source_uri)
    estimator = build_estimator(config, sdk.session)
    estimator.fit(training_inputs(config), job_name=config.spec.job_name, wait=False, logs=False)
    if config.dry_run:
        sdk.finish()
        return sdk.requests[-1]
    return {"TrainingJobName": estimator.latest_training_job.job_name}


def request_json(request: dict) -> str:
    """The captured request as indented JSON (datetimes and the like as strings)."""
    return json.dumps(request, indent=1, sort_keys=True, default=str)
