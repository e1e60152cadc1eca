"""A SageMaker training job built and submitted from Python with the SageMaker SDK (v2), as a dry run.

The job runs this project's entry point (`examples/sagemaker_entry_point.py`)
in AWS's TensorFlow 2.14 training container on two instances with MPI, so
that each trains as a Horovod rank; its hyperparameters are `deepfm.train`
flags. It is built with the SDK's own `sagemaker.tensorflow.TensorFlow`
estimator and `TrainingInput` channels, as a script of yours would.

By default nothing is contacted and no credentials are needed: the SDK's
SageMaker client is stubbed with botocore's `Stubber`, which checks the
`CreateTrainingJob` request against the SageMaker API model, and the request
is printed as JSON (`jobs.sagemaker.submit.open_session` does the
capturing). With `--submit` the same request goes to SageMaker, and the
project's source tarball to S3 (AWS credentials needed)::

    pip install 'sagemaker>=2.200,<3'      # the 'sdk' extra
    python examples/submit_with_sdk.py                         # dry run: prints the request
    python examples/submit_with_sdk.py --submit --role arn:aws:iam::<account>:role/<role> --bucket <bucket>

`python -m deepfm.sagemaker submit` builds the same kind of job from the
command line; `python -m deepfm.sagemaker local` runs it on this machine.
"""

import argparse
import os
import tempfile

from jobs import source as source_lib
from jobs import spec as spec_lib
from jobs.sagemaker import container as container_lib
from jobs.sagemaker import metrics as sagemaker_metrics
from jobs.sagemaker import submit as sagemaker_submit

PLACEHOLDER_ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
PLACEHOLDER_BUCKET = "my-bucket"
# Hyperparameters: flags of `deepfm.train` (the entry point maps the container to the others).
HYPERPARAMETERS = {"num_epochs": 2, "batch_size": 1024, "optimizer": "lazy_adam", "embedding_size": 32}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--submit", action="store_true", help="submit for real (default: a dry run)")
    parser.add_argument("--role", default=PLACEHOLDER_ROLE, help="the IAM role ARN the job runs as")
    parser.add_argument("--bucket", default=PLACEHOLDER_BUCKET,
                        help="S3 bucket of the data (<prefix>/data/{train,validation}), the source and the results")
    parser.add_argument("--prefix", default="deepfm", help="key prefix in the bucket")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--job_name", default=None, help="default: deepfm-<UTC time>")
    parser.add_argument("--instance_count", type=int, default=2)
    parser.add_argument("--instance_type", default="ml.c5.xlarge")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.submit and (args.role == PLACEHOLDER_ROLE or args.bucket == PLACEHOLDER_BUCKET):
        raise SystemExit("submit_with_sdk: --submit needs your own --role and --bucket")
    job_name = args.job_name or spec_lib.default_job_name()
    base = "s3://%s/%s" % (args.bucket, args.prefix)
    dry_run = not args.submit

    # The SDK, imported quietly (or a message saying how to install it). Its session's SageMaker
    # client is stubbed in a dry run; every CreateTrainingJob request it makes is captured.
    sagemaker_submit.import_sdk()
    from sagemaker.inputs import TrainingInput
    from sagemaker.tensorflow import TensorFlow
    answer = {"TrainingJobArn": sagemaker_submit.dry_run_arn(args.region, "training-job", job_name)}
    sdk = sagemaker_submit.open_session(args.region, args.bucket, sagemaker_submit.TRAINING_JOB_OPERATION,
                                        dry_run=dry_run, dry_run_responses=[answer])

    # The source: the entry point at the archive's root, this project's packages beside it.
    # It goes to S3 here (not in a dry run), so the SDK uploads nothing itself.
    source_uri = "%s/%s/source/%s" % (base, job_name, source_lib.SOURCE_TARBALL)
    with tempfile.TemporaryDirectory() as tmp:
        sdk.upload(source_lib.write_source_tarball(os.path.join(tmp, source_lib.SOURCE_TARBALL)), source_uri)

    estimator = TensorFlow(
        entry_point=spec_lib.ENTRY_POINT,                # sagemaker_entry_point.py
        source_dir=source_uri,
        framework_version=sagemaker_submit.FRAMEWORK_VERSION,  # TensorFlow 2.14
        py_version=sagemaker_submit.PY_VERSION,                # py310
        role=args.role,
        instance_count=args.instance_count,
        instance_type=args.instance_type,
        # One Horovod rank per instance: the entry point picks `--strategy horovod` under MPI.
        distribution={"mpi": {"enabled": True, "processes_per_host": 1}},
        hyperparameters=HYPERPARAMETERS,
        # The console's progress and summary lines, as SageMaker metrics (loss, examples/sec, AUC).
        metric_definitions=[dict(definition) for definition in sagemaker_metrics.METRIC_DEFINITIONS],
        output_path="%s/output" % base,
        # Checkpoints synced with S3, so that a stopped or spot-interrupted job resumes; the
        # entry point trains in this local path (`model_dir`).
        checkpoint_s3_uri="%s/%s/checkpoints" % (base, job_name),
        checkpoint_local_path=container_lib.CHECKPOINT_LOCAL_PATH,
        model_dir=container_lib.CHECKPOINT_LOCAL_PATH,
        sagemaker_session=sdk.session,
        disable_profiler=True,
        debugger_hook_config=False,
    )
    channels = {name: TrainingInput("%s/data/%s" % (base, name)) for name in ("train", "validation")}
    estimator.fit(channels, job_name=job_name, wait=False, logs=False)

    if dry_run:
        sdk.finish()  # the stub was asked for what it answers
        print(sagemaker_submit.request_json(sdk.requests[-1]))
    else:
        print("submitted %s" % estimator.latest_training_job.job_name)


if __name__ == "__main__":
    main()
