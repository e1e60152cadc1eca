"""Embedding tables split by rows over Horovod ranks: the building blocks of the `hybrid` strategy.

Each embedding table is split by rows over the ranks; each rank holds and
updates only its rows, while the dense variables stay replicated and
data-parallel. One concept per module:

* `ownership`: which rank owns which rows (id `i` on rank `i % size`, local
  row `i // size`), and how a shard is initialized;
* `exchange`: the all-to-alls of a lookup (ids to owners, rows back,
  gradients to owners), padded to fixed shapes for Horovod's cache;
* `table`: `ShardedEmbedding`, one table's shard, and lookups of several
  tables in one exchange;
* `pipeline`: `ExchangePipeline`, the next batch's exchange while the
  current batch trains;
* `checkpoint`: checkpoints whose layout does not depend on the number of
  ranks.

Every function that exchanges data is a collective: every rank must build
the same graph and run the same steps, saves and restores.
"""
