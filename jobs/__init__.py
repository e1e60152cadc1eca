"""Running jobs: local clusters, emulated hosts, SageMaker and Kubernetes jobs.

This layer sits above the strategies: it starts, places and supervises the
processes of a job, and never imports TensorFlow at start-up (the training
processes it starts do).

* `spec`: the job, neutral of where it runs (instances, distribution,
  channels, hyperparameters); `source`: the project's source as a container
  gets it; `elastic`: the sizes an elastic job may run at;
  `auto_distribution`: the distribution the cost model predicts fastest.
* `local/`: this machine: a parameter-server cluster or Horovod ranks
  (`launcher`, behind `deepfm.launch`), the supervision of a job's processes
  (`processes`), emulated hosts in network namespaces (`hosts`, `host_init`).
* `sagemaker/`: a SageMaker training job: the container's files
  (`container`) and environment (`env`), run here under the real toolkit
  (`local`) or submitted with the SDK (`submit`), its metrics (`metrics`),
  and the Criteo conversion as Processing jobs (`processing`).
* `kubernetes/`: the job as Kubeflow and JobSet manifests (`manifests`), the
  training containers' entry point (`entry`), and a manifest run here the
  way its operator runs it (`local/`).
"""
