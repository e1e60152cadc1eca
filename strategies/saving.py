"""A checkpoint `Saver` that reads each variable without copying it.

TF's saveable of a resource variable reads it with `read_value_no_copy()`:
a `DisableCopyOnRead` op, then the read. In graph mode nothing makes the
read wait for that op, and nothing fetched depends on it, so it is pruned:
a variable that a sparse update or lookup put in copy-on-read mode (every
embedding table and its slots, after the first step) is copied whole by
every save. Measured on a 5M-id DeepFM (1.98 GB of weights and `lazy_adam`
slots): each save after the first step took the process from 2.4 to 4.3 GB
(docs/large_tables.md, "Tables larger than a host").

`no_copy_saver` builds the Estimator's usual saver (sharded, relative
paths, the same names and slices) from saveables whose read runs after the
`DisableCopyOnRead` of its variable. The variable is then shared with the
save until the save ends; its next sparse update turns copy-on-read mode on
again without a copy, since the save no longer holds the buffer.

That saver (`NoCopySaver`) also logs how long each restore took, and does
not write again the checkpoint it has just restored: the Estimator's
`CheckpointSaverHook` saves at the start of every session, so a resumed run
rewrote the checkpoint it resumed from, the same variables at the same step
(7.9 GB at 20M ids with `lazy_adam`'s slots), before its first step.
"""

import os
import time
from typing import Dict, List, Optional, Sequence, Union

import tensorflow as tf
from absl import logging

# No public API builds a custom saveable for `tf.compat.v1.train.Saver`.
from tensorflow.python.ops import resource_variable_ops
from tensorflow.python.ops import variables as variables_lib
from tensorflow.python.training.saving import saveable_object, saveable_object_util

HOST_CPU = "/device:CPU:0"


class NoCopySaveable(saveable_object_util.ResourceVariableSaveable):
    """A resource variable's saveable whose save reads it without a copy.

    Args:
      variable: the resource variable (or one partition of one).
      slice_spec: its slice of the saved tensor ("" for a whole variable).
      name: the saved tensor's name.
    """

    def __init__(self, variable: tf.Variable, slice_spec: str, name: str):
        super().__init__(variable, slice_spec, name)

        def read() -> tf.Tensor:
            value = read_no_copy(variable)
            with tf.device(HOST_CPU):
                return tf.identity(value)

        self.specs = [saveable_object.SaveSpec(read, slice_spec, name, dtype=variable.dtype,
                                               device=variable.device)]


def read_no_copy(variable: tf.Variable) -> tf.Tensor:
    """The value of a resource variable, read after turning its copy-on-read mode off: no copy of it is made.

    The variable's next sparse update turns the mode on again, copying it
    only if the value read is still alive then.
    """
    with tf.device(variable.device):
        no_copy = tf.raw_ops.DisableCopyOnRead(resource=variable.handle)
        with tf.control_dependencies([no_copy]):
            return tf.raw_ops.ReadVariableOp(resource=variable.handle, dtype=variable.dtype.base_dtype)


SaverItem = Union[tf.Variable, saveable_object.SaveableObject, List]


def no_copy_saveables(variables: Optional[Sequence] = None) -> Dict[str, SaverItem]:
    """The `var_list` of a `Saver` of `variables`, resource variables read without a copy.

    Args:
      variables: variables, partitioned variables or saveables; default:
        what the Estimator's saver saves (the global variables and the
        saveable objects of the graph).

    Returns:
      Saved name -> the variable's `NoCopySaveable` (a list of them for a
      partitioned variable); other variables and saveables as they were.
    """
    if variables is None:
        variables = (tf.compat.v1.global_variables()
                     + tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS))
    items = [item for item in variables if not isinstance(item, saveable_object.SaveableObject)]
    saveables = [item for item in variables if isinstance(item, saveable_object.SaveableObject)]
    named: Dict[str, SaverItem] = {}
    for name, value in saveable_object_util.op_list_to_dict(items, convert_variable_to_tensor=False).items():
        named[name] = _no_copy(value, name)
    for saveable in saveables:
        named[saveable.name] = saveable
    return named


def _no_copy(value, name: str) -> SaverItem:
    """`value` (a variable or a list of partitions) with each resource variable as a `NoCopySaveable`."""
    if isinstance(value, (list, tuple, variables_lib.PartitionedVariable)):
        return [_no_copy_part(part, name) for part in value]
    if isinstance(value, resource_variable_ops.BaseResourceVariable):
        return NoCopySaveable(value, "", name)
    return value


def _no_copy_part(part, name: str):
    """One partition of a partitioned variable, saved as its slice of the full tensor."""
    info = getattr(part, "_save_slice_info", None)
    if info is None or not isinstance(part, resource_variable_ops.BaseResourceVariable):
        return part
    return NoCopySaveable(part, info.spec, name)


class NoCopySaver(tf.compat.v1.train.Saver):
    """A `Saver` that logs each restore's seconds and skips saving again the checkpoint it restored.

    A save asked for at the step of the checkpoint this saver restored last,
    to the same path, before any other save, returns that path and writes
    nothing: the session holds exactly what that checkpoint holds, since the
    global step has not moved.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._restored: Optional[str] = None

    def restore(self, sess, save_path):
        started = time.monotonic()
        super().restore(sess, save_path)
        logging.info("restored %s in %.2f s", save_path, time.monotonic() - started)
        self._restored = save_path

    def save(self, sess, save_path, global_step=None, *args, **kwargs):
        restored, self._restored = self._restored, None
        if restored is not None and global_step is not None:
            step = (tf.compat.v1.train.global_step(sess, global_step)
                    if isinstance(global_step, (tf.Tensor, tf.Variable)) else int(global_step))
            path = "%s-%d" % (save_path, step)
            if os.path.abspath(path) == os.path.abspath(restored) and tf.io.gfile.exists(path + ".index"):
                logging.info("not saving %s again: the session holds what it restored from it", path)
                return restored
        return super().save(sess, save_path, global_step, *args, **kwargs)


def no_copy_saver(variables: Optional[Sequence] = None, **saver_kwargs) -> NoCopySaver:
    """A `NoCopySaver` of `no_copy_saveables(variables)`.

    Args:
      variables: as `no_copy_saveables`.
      **saver_kwargs: for the `Saver` (`max_to_keep`, ...); `sharded` and
        `save_relative_paths` default to True, as the Estimator's own saver.
    """
    saver_kwargs.setdefault("sharded", True)
    saver_kwargs.setdefault("save_relative_paths", True)
    return NoCopySaver(var_list=no_copy_saveables(variables), **saver_kwargs)


def with_no_copy_saver(spec: tf.estimator.EstimatorSpec, max_to_keep: int) -> tf.estimator.EstimatorSpec:
    """A TRAIN `spec` whose scaffold saves with `no_copy_saver`, unless it brings a saver of its own."""
    scaffold = spec.scaffold
    if scaffold.saver is not None or tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS):
        return spec
    saver = no_copy_saver(max_to_keep=max_to_keep)
    tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SAVERS, saver)
    return spec._replace(scaffold=tf.compat.v1.train.Scaffold(saver=saver, copy_from_scaffold=scaffold))
