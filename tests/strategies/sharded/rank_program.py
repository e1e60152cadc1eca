"""One Horovod rank of the sharded-embedding tests, recording what they compare.

The tests of `tests/strategies/sharded/` start it under horovodrun from the
repository root::

    horovodrun --gloo -np 3 -H localhost:3 python -m tests.strategies.sharded.rank_program \
        --mode lookup --result_dir D

* `--mode lookup`: for each case of `CASES`, the two tables of
  `TableSpec`s are set to `initial_tables()`, and `STEPS` training steps run
  on the batches of `step_ids(step, rank, size)`. Writes
  `D/<case>-rank-<R>.npz`: the looked-up rows, counters and gradient
  indices of every step, and the final shards, slots and dense variable.
* `--mode pipeline`: trains the `hybrid` strategy with and without its
  exchange pipeline (`--data_dir`), each to `--first_steps` and resumed to
  `--max_steps`; writes `D/<variant>-rank-<R>.npz`, every step's loss.
* `--mode estimator`: trains the small model of `model_fn` with an
  Estimator (sharded checkpoints, `ShardedCheckpointSaverHook`) up to
  `--max_steps`, rank 0 in `--model_dir`, the others in private
  directories; writes `D/dump-rank-<R>.npz` (the shards and slots after
  session start) and `D/end-rank-<R>.npz` (at the end), and, with
  `--predict`, `D/predictions-rank-<R>.npz` (`predict_ids()`, restored from
  each rank's own checkpoint).

The data are functions of (step, rank, size) that the test also calls to
compute the single-process result.
"""

import atexit
import functools
import json
import os
import shutil
import tempfile
from typing import Dict, NamedTuple, Optional

import numpy as np
import tensorflow as tf
from absl import app, flags

from strategies.sharded import checkpoint as checkpoint_lib
from strategies.sharded import ownership
from strategies.sharded import table as table_lib

SCOPE = "model"
NUM_ROWS = 301  # uneven shards at 2 and 3 ranks
WIDTH = 4
BATCH = 6
FIELDS = 5
STEPS = 3
# Each step's batch ids: random with duplicates; all owned by the last rank
# (the other ranks own none of them); each rank's ids owned by the next rank.
RANDOM_STEP, ONE_OWNER_STEP, NEXT_OWNER_STEP = range(STEPS)
HOT_IDS = 12
ID_CAPACITY = BATCH * FIELDS
LEARNING_RATE = 0.1
ADAM_LEARNING_RATE = 0.05
SGD, ADAM, LAZY_ADAM = "sgd", "adam", "lazy_adam"


class Case(NamedTuple):
    """One lookup configuration: the optimizer and the exchange options."""

    name: str
    optimizer: str
    id_capacity: Optional[int] = None
    exchange_fp16: bool = False
    together: bool = False  # both tables' rows in one exchange (`lookup_together`)


CASES = (Case("sgd", SGD), Case("adam", ADAM), Case("lazy_adam", LAZY_ADAM),
         Case("lazy_adam_padded", LAZY_ADAM, id_capacity=ID_CAPACITY),
         # Places sized from the first batch, and too few to start with: the later steps need more.
         Case("lazy_adam_places_from_first_batch", LAZY_ADAM, id_capacity=0),
         Case("sgd_places_grow", SGD, id_capacity=2),
         Case("sgd_fp16", SGD, exchange_fp16=True),
         Case("lazy_adam_together", LAZY_ADAM, together=True),
         Case("adam_padded_fp16_together", ADAM, id_capacity=ID_CAPACITY, exchange_fp16=True, together=True))
CASES_BY_NAME = {case.name: case for case in CASES}


class TableSpec(NamedTuple):
    name: str
    width: Optional[int]


# A table of rows and a table of scalars (as the FM factors and weights), sharing one id exchange.
TABLES = (TableSpec("v", WIDTH), TableSpec("w", None))
DENSE = "dense"

FLAGS = flags.FLAGS


def initial_tables() -> Dict[str, np.ndarray]:
    """The full tables and the dense variable at the start."""
    rng = np.random.RandomState(3)
    values = {spec.name: rng.randn(NUM_ROWS, *(() if spec.width is None else (spec.width,))).astype(np.float32)
              for spec in TABLES}
    values[DENSE] = rng.randn(WIDTH).astype(np.float32)
    return values


def step_ids(step: int, rank: int, size: int) -> np.ndarray:
    """The int64 ids rank `rank` of `size` looks up at `step` (see the step names)."""
    rng = np.random.RandomState(100 * step + rank)
    if step == RANDOM_STEP:
        hot = rng.randint(0, HOT_IDS, size=(BATCH, FIELDS))
        cold = rng.randint(0, NUM_ROWS, size=(BATCH, FIELDS))
        return np.where(rng.rand(BATCH, FIELDS) < 0.5, hot, cold).astype(np.int64)
    if step == ONE_OWNER_STEP:
        owner = size - 1
        return (owner + size * rng.randint(0, (NUM_ROWS - owner) // size, size=(BATCH, FIELDS))).astype(np.int64)
    owner = (rank + 1) % size
    return (owner + size * rng.randint(0, (NUM_ROWS - owner) // size, size=(BATCH + 1,))).astype(np.int64)


def step_coefficients(step: int, rank: int, shape) -> np.ndarray:
    """Per-element weights of a rank's loss at a step."""
    return np.random.RandomState(1000 + 100 * step + rank).uniform(0.5, 1.5, size=shape).astype(np.float32)


def rank_loss(rows: Dict[str, tf.Tensor], dense: tf.Tensor, step: int, rank: int) -> tf.Tensor:
    """One rank's loss at a step from its looked-up rows: not linear in the rows."""
    v, w = rows["v"], rows["w"]
    return (tf.reduce_sum(step_coefficients(step, rank, v.shape.as_list()) * tf.square(v))
            + tf.reduce_sum(v * dense)
            + tf.reduce_sum(step_coefficients(step, rank, w.shape.as_list()) * tf.square(w + 1.0)))


def make_optimizer(name: str):
    """The optimizer of a case."""
    from deepfm.models.optimizers import LazyAdamOptimizer
    if name == SGD:
        return tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE)
    if name == ADAM:
        return tf.compat.v1.train.AdamOptimizer(ADAM_LEARNING_RATE)
    return LazyAdamOptimizer(ADAM_LEARNING_RATE)


def _session_config() -> tf.compat.v1.ConfigProto:
    return tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)


def run_lookup_case(case: Case, hvd, result_dir: str) -> None:
    """Trains `STEPS` steps of one case on this rank and writes what the test compares."""
    rank, size = hvd.rank(), hvd.size()
    initial = initial_tables()
    with tf.Graph().as_default():
        with tf.compat.v1.variable_scope(SCOPE):
            tables = {spec.name: table_lib.ShardedEmbedding(
                spec.name, NUM_ROWS, spec.width, rank, size, hvd, exchange_fp16=case.exchange_fp16,
                id_capacity=case.id_capacity) for spec in TABLES}
            dense = tf.compat.v1.get_variable(DENSE, initializer=initial[DENSE])
        optimizer = hvd.DistributedOptimizer(make_optimizer(case.optimizer))
        for table in tables.values():
            optimizer.register_local_var(table.variable)
        steps = []
        for step in range(STEPS):
            ids = tf.constant(step_ids(step, rank, size))
            routing = tables["v"].route(ids)
            if case.together:
                rows = dict(zip(tables, table_lib.lookup_together(list(tables.values()), ids, routing)))
            else:
                rows = {name: table.lookup(ids, routing) for name, table in tables.items()}
            loss = rank_loss(rows, dense, step, rank)
            # `minimize` in its two parts: the shard's gradient is the one the update applies (Horovod's keeps
            # the indices of the one `tf.gradients` gives, and divides the values by the ranks).
            gradients = optimizer.compute_gradients(loss)
            train = optimizer.apply_gradients(gradients)
            gradient = {variable.ref(): value for value, variable in gradients}[tables["v"].variable.ref()]
            if not isinstance(gradient, tf.IndexedSlices):
                raise TypeError("the shard's gradient is a %s, not an IndexedSlices" % type(gradient).__name__)
            steps.append(dict(rows=rows, stats=tables["v"].lookup_stats, gradient_rows=gradient.indices,
                              train=train))
        record = {}
        with tf.compat.v1.Session(config=_session_config()) as session:
            session.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
            owned = ownership.owned_ids(NUM_ROWS, rank, size)
            session.run([table.variable.assign(initial[name][owned]) for name, table in tables.items()])
            for step, fetches in enumerate(steps):
                # The rows and gradients before this step's update.
                rows, stats, gradient_rows = session.run(
                    [fetches["rows"], fetches["stats"], fetches["gradient_rows"]])
                session.run(fetches["train"])
                for name, value in rows.items():
                    record["rows_%s_%d" % (name, step)] = value
                record["distinct_ids_%d" % step] = stats.distinct_ids
                record["rows_served_%d" % step] = stats.rows_served
                record["gradient_rows_%d" % step] = gradient_rows
            # Every final value in one run (each run of new fetches costs an executor).
            final = {"var_" + table.checkpoint_name(variable): variable
                     for table in tables.values() for variable in [table.variable] + table.slot_variables()}
            final.update({"var_" + variable.op.name: variable for variable in
                          [dense] + [optimizer.get_slot(dense, slot) for slot in optimizer.get_slot_names()]})
            record.update(session.run(final))
    np.savez(os.path.join(result_dir, "%s-rank-%d.npz" % (case.name, rank)), **record)


# --- the Estimator job --------------------------------------------------------------------

PREDICT_ROWS = 12
ESTIMATOR_LEARNING_RATE = 0.05


def train_batch(step: int, rank: int) -> np.ndarray:
    """The ids of a rank's training batch (a pure function of step and rank)."""
    return np.random.RandomState(5000 + 100 * step + rank).randint(0, NUM_ROWS, size=(BATCH, FIELDS))


def train_labels(ids: np.ndarray) -> np.ndarray:
    return (ids.sum(axis=1) % 2).astype(np.float32)


def predict_ids() -> np.ndarray:
    """The ids every rank predicts after training (every rank owns some)."""
    return np.random.RandomState(7).randint(0, NUM_ROWS, size=(PREDICT_ROWS, FIELDS))


def logits(rows: Dict[str, tf.Tensor], dense: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """The model's logits from the looked-up rows: the same sharded or not."""
    return (tf.reduce_sum(rows["v"] * dense, axis=[1, 2]) + tf.reduce_sum(rows["w"], axis=1) + bias)


def plain_variables() -> Dict[str, tf.Variable]:
    """The model's variables as a single process creates them (unsharded)."""
    with tf.compat.v1.variable_scope(SCOPE):
        variables = {spec.name: tf.compat.v1.get_variable(
            spec.name, [NUM_ROWS] + ([] if spec.width is None else [spec.width])) for spec in TABLES}
        variables[DENSE] = tf.compat.v1.get_variable(DENSE, [WIDTH])
        variables["bias"] = tf.compat.v1.get_variable("bias", [])
    return variables


class _DumpHook(tf.estimator.SessionRunHook):
    """Writes every sharded variable after session start or at the end."""

    def __init__(self, checkpoint: checkpoint_lib.ShardedCheckpoint, path: str, at_start: bool):
        self._checkpoint = checkpoint
        self._path = path
        self._at_start = at_start
        self._variables = None

    def begin(self):
        self._variables = {table.checkpoint_name(variable): variable
                           for table, variable in self._checkpoint.sharded_variables()}
        self._variables["global_step"] = tf.compat.v1.train.get_global_step()

    def _dump(self, session):
        np.savez(self._path, **session.run(self._variables))

    def after_create_session(self, session, coord):
        if self._at_start:
            self._dump(session)

    def end(self, session):
        if not self._at_start:
            self._dump(session)


def model_fn(features, labels, mode, params, hvd):
    """A tiny CTR model on two sharded tables, checkpointed by `ShardedCheckpoint`."""
    rank, size = hvd.rank(), hvd.size()
    with tf.compat.v1.variable_scope(SCOPE, reuse=tf.compat.v1.AUTO_REUSE):
        tables = [table_lib.ShardedEmbedding(spec.name, NUM_ROWS, spec.width, rank, size, hvd)
                  for spec in TABLES]
        dense = tf.compat.v1.get_variable(DENSE, [WIDTH])
        bias = tf.compat.v1.get_variable("bias", [], initializer=tf.compat.v1.zeros_initializer())
    routing = tables[0].route(features)
    output = logits({table.name: table.lookup(features, routing) for table in tables}, dense, bias)
    if mode == tf.estimator.ModeKeys.PREDICT:
        checkpoint = checkpoint_lib.ShardedCheckpoint(tables, hvd)
        return tf.estimator.EstimatorSpec(mode, predictions={"logits": output}, scaffold=checkpoint.scaffold(),
                                          prediction_hooks=[checkpoint.restore_hook(params["shared_dir"], False)])
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=output))
    optimizer = hvd.DistributedOptimizer(make_optimizer(LAZY_ADAM))
    for table in tables:
        optimizer.register_local_var(table.variable)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    checkpoint = checkpoint_lib.ShardedCheckpoint(tables, hvd)
    scaffold = checkpoint.scaffold(max_to_keep=params["keep"])
    saver_hook = checkpoint_lib.ShardedCheckpointSaverHook(
        params["checkpoint_dir"], checkpoint, save_steps=params["save_steps"], scaffold=scaffold,
        model_dir=params["shared_dir"], keep=params["keep"])
    hooks = [_DumpHook(checkpoint, params["dump_path"], at_start=True),
             _DumpHook(checkpoint, params["end_path"], at_start=False)]
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, scaffold=scaffold,
                                      training_chief_hooks=[saver_hook], training_hooks=hooks)


def run_estimator(hvd, result_dir: str, model_dir: str, max_steps: int, save_steps: int, predict: bool) -> None:
    """Trains to `max_steps` on every rank, then optionally predicts `predict_ids()`."""
    rank = hvd.rank()
    shared_dir = model_dir
    if rank != checkpoint_lib.ROOT_RANK:
        model_dir = tempfile.mkdtemp(prefix="sharded-rank%d-" % rank)
        atexit.register(shutil.rmtree, model_dir, ignore_errors=True)
    params = dict(checkpoint_dir=model_dir, shared_dir=shared_dir, save_steps=save_steps, keep=10,
                  dump_path=os.path.join(result_dir, "dump-rank-%d.npz" % rank),
                  end_path=os.path.join(result_dir, "end-rank-%d.npz" % rank))
    config = tf.estimator.RunConfig(model_dir=model_dir, save_checkpoints_steps=None, save_checkpoints_secs=None,
                                    session_config=_session_config(), log_step_count_steps=None,
                                    tf_random_seed=11 + rank)
    estimator = tf.estimator.Estimator(functools.partial(model_fn, hvd=hvd), config=config, params=params)

    def train_input():
        batches = np.stack([train_batch(step, rank) for step in range(max_steps)])
        return tf.data.Dataset.from_tensor_slices((batches, train_labels(batches.reshape(-1, FIELDS)).reshape(
            max_steps, BATCH))).repeat()

    estimator.train(train_input, max_steps=max_steps)
    if predict:
        predictions = estimator.predict(
            lambda: tf.data.Dataset.from_tensors(predict_ids()), yield_single_examples=False)
        values = np.concatenate([batch["logits"] for batch in predictions])
        np.savez(os.path.join(result_dir, "predictions-rank-%d.npz" % rank), logits=values)


# --- the hybrid strategy with and without its exchange pipeline -----------------------------------

PIPELINE_VARIANTS = (("pipelined", {"exchange_pipeline": True}), ("in_step", {"exchange_pipeline": False}))
PIPELINE_BATCH = 32


def run_pipeline_variants(data_dir: str, result_dir: str, first_steps: int, last_steps: int) -> None:
    """Trains the `hybrid` strategy with and without its exchange pipeline, each to `first_steps`, then resumed.

    Writes `<result_dir>/<variant>-rank-<R>.npz`: `losses`, every step's
    training loss on this rank (both runs, in order), and `global_steps`.

    The preflight checks of memory and data (a graph and a pass over the
    data per run and rank, a third of the CPU here) are off: they change no
    step, and the hybrid ranks of `tests/strategies/test_hybrid.py` run them.
    """
    import deepfm
    import strategies
    from deepfm.runtime import hooks
    from input_pipeline import dataset

    data = dataset.Dataset.open([data_dir], [])
    model = deepfm.ModelConfig(feature_size=data.metadata.feature_size, field_size=data.metadata.field_size,
                               embedding_size=4, deep_layers=(8,), dropout=(0.0,), learning_rate=0.01)
    for variant, options in PIPELINE_VARIANTS:
        strategy = strategies.make_config("hybrid", lr_scaling="none", intra_op_threads=1, inter_op_threads=1,
                                          **options)
        model_dir = os.path.join(result_dir, variant + "-model")
        losses, global_steps = [], []
        for phase, max_steps in enumerate((first_steps, last_steps)):
            progress = os.path.join(result_dir, "%s-%d-{task}.jsonl" % (variant, phase))
            deepfm.train_and_evaluate(
                deepfm.TrainConfig(model_dir=model_dir, train_files=data.train_files, batch_size=PIPELINE_BATCH,
                                   max_steps=max_steps, log_every_n_steps=1, save_checkpoints_steps=first_steps,
                                   seed=17, progress_file=progress, check_memory=False, check_data=False),
                model, strategy=strategy)
            with open(progress.replace(hooks.TASK_PLACEHOLDER, "rank%d" % _rank())) as f:
                records = [json.loads(line) for line in f]
            losses += [record["loss"] for record in records]
            global_steps += [record["global_step"] for record in records]
        np.savez(os.path.join(result_dir, "%s-rank-%d.npz" % (variant, _rank())), losses=np.array(losses),
                 global_steps=np.array(global_steps))


def _rank() -> int:
    import horovod.tensorflow as hvd
    return hvd.rank()


def define_flags() -> None:
    flags.DEFINE_enum("mode", None, ["lookup", "estimator", "pipeline"], "What to run.")
    flags.DEFINE_string("data_dir", None, "The dataset root (pipeline mode).")
    flags.DEFINE_integer("first_steps", 6, "Pipeline mode: the first run's steps; the second resumes.")
    flags.DEFINE_string("result_dir", None, "Where the .npz records go.")
    flags.DEFINE_list("cases", [case.name for case in CASES], "Lookup cases to run, in this order.")
    flags.DEFINE_string("model_dir", None, "Rank 0's model_dir (estimator mode).")
    flags.DEFINE_integer("max_steps", 4, "The global step to train to (estimator mode).")
    flags.DEFINE_integer("save_steps", 2, "Save every this many steps (estimator mode).")
    flags.DEFINE_bool("predict", False, "Predict predict_ids() after training (estimator mode).")
    flags.mark_flags_as_required(["mode", "result_dir"])


def main(argv):
    del argv
    import horovod.tensorflow as hvd
    hvd.init()
    os.makedirs(FLAGS.result_dir, exist_ok=True)
    if FLAGS.mode == "lookup":
        for name in FLAGS.cases:
            run_lookup_case(CASES_BY_NAME[name], hvd, FLAGS.result_dir)
    elif FLAGS.mode == "pipeline":
        run_pipeline_variants(FLAGS.data_dir, FLAGS.result_dir, FLAGS.first_steps, FLAGS.max_steps)
    else:
        if not FLAGS.model_dir:
            raise app.UsageError("--mode estimator needs --model_dir")
        run_estimator(hvd, FLAGS.result_dir, FLAGS.model_dir, FLAGS.max_steps, FLAGS.save_steps, FLAGS.predict)


if __name__ == "__main__":
    define_flags()
    app.run(main)
