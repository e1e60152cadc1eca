"""Former home of the sharded-embedding building blocks, now the package `strategies.sharded`.

Importing this module warns; its names are those of `strategies.sharded.ownership`,
`.exchange`, `.table` and `.checkpoint`.
"""

import warnings

from strategies.sharded.checkpoint import (  # noqa: F401
                                           NOTHING_TO_RESTORE,
                                           RESTORE,
                                           RESTORE_FAILED,
                                           ROOT_RANK,
                                           RestoreShardsHook,
                                           ShardedCheckpoint,
                                           ShardedCheckpointSaverHook,
)
from strategies.sharded.exchange import ID_DTYPES, PADDING_ROW, IdRouting, LookupStats, group_by_owner, route_ids  # noqa: F401
from strategies.sharded.ownership import (  # noqa: F401
                                           FAN_MODES,
                                           INT32_MAX,
                                           SEED_STRIDE_PER_RANK,
                                           first_rows,
                                           id_order_positions,
                                           id_order_positions_tensor,
                                           local_row_of,
                                           owned_ids,
                                           owner_of,
                                           rank_order,
                                           shard_initializer,
                                           shard_rows,
)
from strategies.sharded.table import SHARD_SUFFIX, ShardedEmbedding, can_share_exchange, lookup_together  # noqa: F401

warnings.warn("strategies.sharded_embedding is now the package strategies.sharded (ownership, exchange, table, "
              "pipeline, checkpoint); import from there", DeprecationWarning, stacklevel=2)
