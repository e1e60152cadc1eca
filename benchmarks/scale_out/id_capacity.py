"""The fixed id capacity of `hybrid+capacity`: measured from the training data before any host starts.

`hybrid --id_capacity N` pads each rank's id exchange to N ids per owner;
N is the most distinct ids a batch of the training data sends one owner
(id % ranks), over every batch of every rank's shard, times
`ID_CAPACITY_MARGIN`, rounded up to a multiple of `ID_CAPACITY_MULTIPLE`.
"""

import dataclasses
import os
import sys
from typing import Tuple

import numpy

from benchmarks.scale_out.config import BenchmarkConfig
from benchmarks.scale_out.variants import ID_CAPACITY_MARGIN

ID_CAPACITY_MULTIPLE = 64


def distinct_ids_per_owner(data_dir: str, batch: int, ranks: int) -> Tuple[int, float]:
    """`(most, mean)` distinct ids a rank's batch sends one owner (id % ranks), over every batch of every rank.

    Reads one epoch of each rank's shard of the training split of `data_dir`
    (a dataset root), as the ranks' input pipelines read them.
    """
    import tensorflow as tf  # only where the capacity is measured, before any host starts

    from input_pipeline import files, formats, pipeline, schema
    metadata = schema.load_metadata(os.path.join(data_dir, schema.METADATA_FILE))
    builder = pipeline.DatasetBuilder(
        files.resolve([data_dir], formats.TFRECORD, split=schema.TRAIN_SPLIT),
        pipeline.PipelineConfig(data_format=formats.TFRECORD, field_size=metadata.field_size), batch_size=batch)
    counts = []
    for rank in range(ranks):
        shard = tf.distribute.InputContext(num_input_pipelines=ranks, input_pipeline_id=rank,
                                           num_replicas_in_sync=ranks)
        for features, _ in builder(shard):
            distinct = numpy.unique(features[schema.FEAT_IDS].numpy())
            counts.extend(numpy.bincount(distinct % ranks, minlength=ranks).tolist())
    return int(max(counts)), float(numpy.mean(counts))


def id_capacity(most_distinct: int) -> int:
    """The fixed id capacity for the most distinct ids per owner measured: x the margin, up to a multiple."""
    wanted = most_distinct * ID_CAPACITY_MARGIN
    return int(-(-wanted // ID_CAPACITY_MULTIPLE) * ID_CAPACITY_MULTIPLE)


def with_id_capacity(config: BenchmarkConfig) -> BenchmarkConfig:
    """`config` with `id_capacity` measured when a variant needs it (at the `+capacity` variants' ranks).

    Raises:
      ValueError: the variants that need it run at different numbers of ranks.
    """
    if not any(variant.uses_id_capacity for variant in config.variants):
        return config
    ranks = {variant.processes for variant in config.variants if variant.uses_id_capacity}
    if len(ranks) > 1:
        raise ValueError("the +capacity variants run at different numbers of ranks %s; one capacity fits one"
                         % sorted(ranks))
    most, mean = distinct_ids_per_owner(config.data_dir, config.batch, ranks.pop())
    capacity = id_capacity(most)
    print("id capacity %d: at most %d distinct ids per owner per batch (mean %.0f)" % (capacity, most, mean),
          file=sys.stderr)
    return dataclasses.replace(config, id_capacity=capacity)
