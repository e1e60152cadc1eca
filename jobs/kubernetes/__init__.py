"""The job on Kubernetes: manifests for Kubeflow's operators and JobSet, the containers' entry, a local run.

`manifests`: the job of `deepfm.sagemaker` (a `jobs.spec.JobSpec`) as a
TFJob, MPIJob or JobSet with its volume claim and image; `entry`: the
command every training container runs; `local/`: a rendered manifest run on
this machine the way its operator runs it. Nothing here imports TensorFlow.
"""
