"""Train from a script of your own: the public API, a dataset root and a strategy chosen by name.

A dataset root is what `python -m dataprep.synthetic` or `python -m
dataprep.criteo` writes: `train/`, `validation/` and `metadata.json`. With
this project importable (installed, or `PYTHONPATH` at its root)::

    python -m dataprep.synthetic --rows 100000 --output_dir data/synthetic
    python examples/train_from_python.py data/synthetic --model_dir runs/py
    python examples/train_from_python.py data/synthetic --model_dir runs/py-tower --strategy tower --num_devices 2

The strategies of several processes (`ps`, `horovod`, `hybrid`) run this
script in every process; `deepfm.launch` starts them and gives each its
part (TF_CONFIG, Horovod ranks), and passes `--strategy` itself::

    python -m deepfm.launch --strategy horovod --np 2 --program examples/train_from_python.py -- \\
        data/synthetic --model_dir runs/py-horovod

`examples/custom_model.py` trains a model_fn of its own with `main` below.
"""

import argparse
import sys
from typing import Callable, Optional, Sequence

import deepfm


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """This script's command line (argparse; the project's own command lines use absl)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("data", help="a dataset root: train/, validation/ and metadata.json")
    parser.add_argument("--model_dir", required=True, help="checkpoints; an existing one is resumed")
    parser.add_argument("--strategy", default="single",
                        help="single, tower, mirrored, ps, horovod, hybrid or auto (deepfm.strategies.names())")
    parser.add_argument("--num_devices", type=int, default=None,
                        help="tower, mirrored: replicas on this host (default: every device)")
    parser.add_argument("--device_type", help="cpu, gpu, or auto (GPUs if any; the default)")
    parser.add_argument("--model", help="the built-in model: deepfm (the default) or dcn")
    parser.add_argument("--batch_size", type=int, default=256, help="examples per replica and step")
    parser.add_argument("--num_epochs", type=int, help="passes over the training data (default: one)")
    parser.add_argument("--max_steps", type=int, default=None, help="steps per worker instead of epochs")
    parser.add_argument("--embedding_size", type=int, default=8)
    parser.add_argument("--deep_layers", default="64,32", help="hidden layer widths, comma-separated")
    parser.add_argument("--learning_rate", type=float, default=0.001)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--export_dir", default=None, help="where the SavedModel goes (none if unset)")
    parser.add_argument("--metrics_file", default=None, help="the chief writes the final metrics here (JSON)")
    return parser.parse_args(argv)


def given(**values):
    """The values given on the command line: the library's defaults stand for the others."""
    return {name: value for name, value in values.items() if value is not None}


def configs(args: argparse.Namespace):
    """The public API's configuration objects for `args`: (TrainConfig, ModelConfig, StrategyConfig).

    Each dataclass checks its own values: a bad one raises ValueError naming it.
    """
    # The dataset's files and its metadata (feature and field sizes), read once.
    data = deepfm.Dataset.open(args.data)
    layers = tuple(int(width) for width in args.deep_layers.split(","))
    model = deepfm.ModelConfig(
        feature_size=data.feature_size, field_size=data.field_size, embedding_size=args.embedding_size,
        deep_layers=layers, dropout=(0.0,) * len(layers), learning_rate=args.learning_rate, **given(model=args.model))
    train = deepfm.TrainConfig(
        model_dir=args.model_dir, train_files=data.train_files, val_files=data.val_files,
        batch_size=args.batch_size, max_steps=args.max_steps, seed=args.seed, export_dir=args.export_dir,
        metrics_file=args.metrics_file, log_every_n_steps=50, **given(num_epochs=args.num_epochs))
    # A strategy by name, with its own options: `make_config` puts each value into the
    # StrategyConfig or into the adapter's options dataclass (deepfm.strategies.options_class),
    # and refuses an option of another strategy, naming the strategies it applies to.
    options = given(num_devices=args.num_devices, device_type=args.device_type)
    strategy = deepfm.strategies.make_config(args.strategy, **options)
    return train, model, strategy


def main(argv: Optional[Sequence[str]] = None, model_fn: Optional[Callable] = None) -> None:
    """Trains, evaluates and exports as `argv` says.

    Args:
      argv: the flags (default: the command line's).
      model_fn: a model_fn of your own; None trains the built-in `--model`.
    """
    args = parse_args(argv)
    # TensorFlow's warnings and errors only, as the project's command lines log.
    deepfm.configure_logging(detail=False)
    try:
        train, model, strategy = configs(args)
    except ValueError as e:  # a bad value: the message names it
        sys.exit("train_from_python: error: %s" % e)
    # This process's part of the job. A parameter server serves until the workers are done
    # and gets None; every training process gets its TrainResult.
    result = deepfm.train_and_evaluate(train, model, strategy=strategy, model_fn=model_fn, console=True)
    if result is not None and result.auc is not None:
        print("%s: validation AUC %.4f after %d steps, %.0f examples/sec" % (
            result.strategy, result.auc, result.global_step, result.examples_per_sec or 0.0))


if __name__ == "__main__":
    main()
