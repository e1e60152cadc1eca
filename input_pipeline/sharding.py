"""Which part of the input each training process reads.

Pure-Python rules, no TensorFlow: a strategy describes where its process
sits (`Topology`) and asks for `(num_shards, index)`, which becomes the
`tf.distribute.InputContext` (`num_input_pipelines`, `input_pipeline_id`)
that `input_pipeline.pipeline.DatasetBuilder` shards by.

File mode (`file_mode_shard`): every process sees the same file list and
reads (size, rank); with ShardedByS3Key (workers_per_host, local_rank): S3
split the files by host, the host's workers split its part. With one worker
per host (parameter servers) that is (num_hosts, host_index), and no shard
with ShardedByS3Key.

Pipe mode (`pipe_mode_shard`): each worker of a host reads its own channel
(`assign_channel`; the first process to open a FIFO takes it, so two workers
on one host can never share one); the same channel may serve workers on
different hosts. The channels of a host are mapped to different S3 paths
(the layout the best-practice text recommends), so they carry different
data: (num_hosts, rank // workers_per_host), as the hosts read the same
channels; with ShardedByS3Key no shard, the data differs by channel and by
host.

`files_balanced` and `rows_per_shard` decide whether files can be dealt out
whole (`files[index::num_shards]`) and what each shard then holds.
"""

import dataclasses
from typing import List, Sequence, Tuple

# Dealing whole files out is accepted when the smallest shard holds at least
# this fraction of the largest one's rows (or bytes); otherwise records are
# sharded. Every shard is cut to the smallest one's steps (see
# `input_pipeline.pipeline`), so this bounds the rows a larger shard leaves
# unread per epoch to 5%.
FILE_SHARD_MIN_BALANCE = 0.95

NO_SHARD = (1, 0)


@dataclasses.dataclass(frozen=True)
class Topology:
    """Where one training process sits in the job.

    Attributes:
      num_hosts: hosts (instances) in the job.
      host_index: this process's host, in [0, num_hosts).
      workers_per_host: training processes on each host.
      local_rank: this process on its host, in [0, workers_per_host).
      rank: this process in the job, in [0, size).
      size: training processes in the job (num_hosts * workers_per_host).
    """

    num_hosts: int = 1
    host_index: int = 0
    workers_per_host: int = 1
    local_rank: int = 0
    rank: int = 0
    size: int = 1

    def __post_init__(self):
        if self.num_hosts < 1 or self.workers_per_host < 1:
            raise ValueError("num_hosts and workers_per_host must be >= 1, got %d and %d"
                             % (self.num_hosts, self.workers_per_host))
        if self.size != self.num_hosts * self.workers_per_host:
            raise ValueError("size must be num_hosts * workers_per_host = %d * %d, got %d"
                             % (self.num_hosts, self.workers_per_host, self.size))
        for name, value, bound in (("host_index", self.host_index, self.num_hosts),
                                   ("local_rank", self.local_rank, self.workers_per_host),
                                   ("rank", self.rank, self.size)):
            if not 0 <= value < bound:
                raise ValueError("%s must be in [0, %d), got %d" % (name, bound, value))

    @classmethod
    def from_ranks(cls, rank: int, size: int, local_rank: int, workers_per_host: int) -> "Topology":
        """Builds the topology of a job whose ranks fill hosts in order.

        Horovod and SageMaker number ranks host by host, so the host of a rank
        is `rank // workers_per_host`.

        Raises:
          ValueError: `size` is not a multiple of `workers_per_host`, or a
            rank is out of range.
        """
        if workers_per_host < 1 or size % workers_per_host:
            raise ValueError("size %d is not a multiple of workers_per_host %d" % (size, workers_per_host))
        return cls(num_hosts=size // workers_per_host, host_index=rank // workers_per_host,
                   workers_per_host=workers_per_host, local_rank=local_rank, rank=rank, size=size)


def file_mode_shard(topology: Topology, s3_sharded: bool) -> Tuple[int, int]:
    """Returns (num_shards, index) of a File-mode process (see the module docstring).

    Args:
      topology: where the process sits.
      s3_sharded: the hosts received different files (`ShardedByS3Key`).
    """
    if s3_sharded:
        return topology.workers_per_host, topology.local_rank
    return topology.size, topology.rank


def pipe_mode_shard(topology: Topology, s3_sharded: bool) -> Tuple[int, int]:
    """Returns (num_shards, index) of a Pipe-mode process (see the module docstring).

    Args:
      topology: where the process sits.
      s3_sharded: the hosts received different objects (`ShardedByS3Key`).
    """
    if s3_sharded:
        return NO_SHARD
    return topology.num_hosts, topology.rank // topology.workers_per_host


def assign_channel(channels: Sequence[str], local_rank: int, workers_per_host: int) -> str:
    """Returns the Pipe-mode channel of worker `local_rank` of its host.

    Channels go to workers in the order given (never sorted): worker i of
    every host reads `channels[i]`.

    Raises:
      ValueError: fewer channels than workers per host, a channel listed
        twice among those used, or `local_rank` out of range.
    """
    channels = list(channels)
    if len(channels) < workers_per_host:
        raise ValueError("%d workers per host need %d channels, got %d: %r"
                         % (workers_per_host, workers_per_host, len(channels), channels))
    if not 0 <= local_rank < workers_per_host:
        raise ValueError("local_rank must be in [0, %d), got %d" % (workers_per_host, local_rank))
    used = channels[:workers_per_host]
    for channel in used:
        if used.count(channel) > 1:
            raise ValueError("channel %r is listed %d times in %r: workers on one host must read "
                             "different channels" % (channel, used.count(channel), used))
    return used[local_rank]


def rows_per_shard(rows: Sequence[int], num_shards: int, by_files: bool) -> List[int]:
    """Rows each shard holds.

    Args:
      rows: rows of each file, in the order the files are read.
      num_shards: shards to split into.
      by_files: deal whole files out (`files[i::num_shards]`); otherwise the
        records are dealt out one by one (`Dataset.shard`).

    Returns:
      A list of `num_shards` row counts.
    """
    if by_files:
        return [sum(rows[index::num_shards]) for index in range(num_shards)]
    total = sum(rows)
    return [total // num_shards + (1 if index < total % num_shards else 0)
            for index in range(num_shards)]


def files_balanced(weights: Sequence[int], num_shards: int,
                   min_balance: float = FILE_SHARD_MIN_BALANCE) -> bool:
    """Whether dealing whole files out keeps the shards even enough.

    Args:
      weights: rows (or bytes, when rows are unknown) of each file.
      num_shards: shards to split into.
      min_balance: the smallest shard must hold at least this fraction of the
        largest.

    Returns:
      True when there are at least `num_shards` files and the shards are
      within `min_balance`.
    """
    if len(weights) < num_shards:
        return False
    totals = rows_per_shard(weights, num_shards, by_files=True)
    return min(totals) > 0 and min(totals) >= min_balance * max(totals)
