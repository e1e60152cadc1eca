"""Running jobs: local clusters, emulated SageMaker hosts, SDK submission.

This layer sits above the strategies: it starts, places and supervises the
processes of a job, and never imports TensorFlow at start-up (the training
processes it starts do).
"""
