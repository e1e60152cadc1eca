"""The public API: train, evaluate and export a CTR model from Python, with any strategy.

    import deepfm

    data = deepfm.Dataset.open("data/synthetic")
    result = deepfm.train_and_evaluate(
        deepfm.TrainConfig(model_dir="runs/m1", train_files=data.train_files, val_files=data.val_files),
        deepfm.ModelConfig(feature_size=data.feature_size, field_size=data.field_size),
        strategy=deepfm.StrategyConfig(name="horovod"), dataset=data)

It is what `python -m deepfm.train` runs once its flags are parsed, and what
an entry-point script of a SageMaker job or of a user's own launcher calls.
"""

from deepfm.config import ModelConfig, TrainConfig


def train_and_evaluate(train: TrainConfig, model: ModelConfig, input_config=None, strategy=None,
                       model_fn=None, console: bool = False, dataset=None):
    """Runs this process's part of a training job: train, evaluate, export, write the metrics.

    Args:
      train: what to train on and where results go.
      model: the model's hyperparameters (`ModelConfig.model` names the
        built-in model trained when `model_fn` is None).
      input_config: an `input_pipeline.pipeline.PipelineConfig`; None:
        TFRecord files with `model.field_size` ids.
      strategy: a `strategies.StrategyConfig`, or a `strategies.Strategy`
        already built (or set up); None: `single`.
      model_fn: an Estimator model_fn of your own (see `strategies.context`
        for what it gets from the strategy); None: the built-in model.
      console: print progress lines and evaluations on the chief, as the
        command line does.
      dataset: the `deepfm.Dataset` the files come from: its metadata, read
        once when it was opened, gives the input pipelines their row counts;
        None: each pipeline reads the metadata beside its files.

    TensorFlow's deprecation notices (about the TF1 APIs the library trains
    with) are kept out of the script's output, unless the script called
    `deepfm.configure_logging` (`detail=True` keeps everything).

    Returns:
      The `deepfm.runtime.trainer.TrainResult`, or None on a process that
      does not train (a parameter server).

    Raises:
      ValueError: a bad configuration, found before training starts (the
        parts are checked together as a `deepfm.JobConfig`).
    """
    from cli import entry
    entry.drop_deprecation_notices()
    import strategies
    from deepfm import job_config
    from deepfm.runtime import console as console_lib
    from deepfm.runtime import trainer
    from input_pipeline import pipeline
    from strategies import topology as topology_lib

    input_config = input_config or pipeline.PipelineConfig(field_size=model.field_size)
    adapter = strategy if isinstance(strategy, strategies.Strategy) else strategies.get(
        strategy or strategies.StrategyConfig())
    job = job_config.JobConfig(train=train, model=model, input=input_config, strategy=adapter.config)
    topology = adapter.setup()
    out = console_lib.Console(enabled=console and topology.role == topology_lib.ROLE_WORKER and topology.is_chief)
    return trainer.run(job, adapter, console=out, model_fn=model_fn, dataset=dataset)

