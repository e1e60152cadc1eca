"""A SageMaker training job: the container's files and environment, a local run under the toolkit, submission.

`container`: what SageMaker writes into a training container; `env`: what a
training script reads back from it; `local`: the job on emulated hosts under
SageMaker's own training toolkit; `submit`: the job sent with the SageMaker
Python SDK (`--dry_run` contacts nothing); `metrics`: the metric definitions
a job's log is read with; `processing_job`: one SageMaker Processing job, run
here on emulated hosts; `processing`: the Criteo conversion as three of them.
Nothing here imports TensorFlow.
"""
