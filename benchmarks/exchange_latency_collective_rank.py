"""One rank of `benchmarks.exchange_latency` on TensorFlow's own collective ops, no Horovod.

Started by `benchmarks.exchange_latency` (controller `tf`), one process per
rank pinned to its own core, each with a `TF_CONFIG` naming the cluster
(`{"cluster": {"worker": [host:port, ...]}, "task": {"type": "worker",
"index": r}}`). Each rank starts a `tf.distribute.Server` for its task with
TensorFlow's collective runtime configured as `MultiWorkerMirroredStrategy`
does in graph mode (the group leader `/job:worker/replica:0/task:0`, the
session's devices filtered to the rank's own task), and runs graph-mode
`tf.compat.v1.Session`s against its own server: the collective ops exchange
their tensors between the processes over gRPC (`CollectiveRemoteAccess`'s
`RecvBuf`), no `session.run` touches another task's devices. The runs with
collectives name a collective graph key (`RunOptions.experimental`): without
one, TensorFlow 2.14's distributed session gives the step no collective
executor (`Failed to get CollectiveExecutor from OpKernelContext for Op
CollectiveAllToAllV2`), since it derives the key only from the V1 ops'
`instance_key` attributes.

Variants (the same payload as `benchmarks.exchange_latency_rank`'s: `--rows`
rows of `--width` float32 for every rank; fixed shapes, as these ops need):

* `session`: a `session.run` on this server that exchanges nothing;
* `tf_collective_alltoall`: `tf.raw_ops.CollectiveAllToAllV2` of a
  `[ranks, rows, width]` tensor: slice i goes to rank i, slice j of the
  result came from rank j. TensorFlow 2.14 registers the op's kernel for CPU
  (`CollectiveAllToAllV2OpKernel`, `Device(DEVICE_CPU)` in
  `core/kernels/collective_ops.cc`), and its implementation `AllToAll`
  (`core/common_runtime/all_to_all.cc`) is device-generic: one
  `PostToPeer`/`RecvFromPeer` per peer through the collective executor's
  remote access, which between tasks is gRPC;
* `tf_collective_gather`: `CollectiveGatherV2` of each rank's `[rows,
  width]` (every rank receives what all-to-all brings it, and its own);
* `tf_collective_reduce`: `CollectiveReduceV2` (`Add`) of the whole
  `[ranks * rows, width]`, the bytes of `horovod_allreduce`.

Before timing, each collective runs once on a payload whose every value
names its sender and receiver, and every rank checks every element it
received (a wrong value fails the rank); what it received from each peer
goes into its JSON (`checks`). Each rank writes `<output_dir>/rank<r>.json`
and waits, before it exits, until every rank has written its own: a rank
that exited early could leave a peer's last transfer unanswered.
"""

import dataclasses
import json
import os
import sys
import time
from typing import Dict, List, TypedDict

import numpy as np
from absl import app, flags

from benchmarks import exchange_latency_rank
from cli import config_flags

FLAGS = flags.FLAGS
JOB = "worker"
GROUP_KEY = 1
# One instance key per collective op of the graph (graph mode reuses each one every step).
INSTANCE_KEYS = {"barrier": 1, "tf_collective_alltoall": 2, "tf_collective_gather": 3, "tf_collective_reduce": 4}
# A received value that names its sender and receiver exactly (float32 holds these integers exactly).
SENDER_SCALE = 1000.0
# A distributed session gives a step a collective executor (and the same step id on every task) only for a
# graph with a collective graph key; any value, the same on every rank (the module docstring).
COLLECTIVE_GRAPH_KEY = 33
FINISH_TIMEOUT_S = 120.0
FINISH_POLL_S = 0.05


@dataclasses.dataclass(frozen=True)
class CollectiveRankOptions:
    """A collective rank's own flag beside `Exchange`'s."""

    output_dir: str = dataclasses.field(metadata=config_flags.metadata("Each rank writes rank<r>.json here."))


def define_flags() -> None:
    # Every one required: the launching benchmark gives them all.
    flag_classes = [exchange_latency_rank.Exchange, CollectiveRankOptions]
    config_flags.define_flags(flag_classes)
    flags.mark_flags_as_required(config_flags.required_flags(flag_classes))


class Cluster(TypedDict):
    """A rank's cluster: the workers' addresses, in rank order, and its own task index."""

    workers: List[str]
    index: int


def cluster_from_env() -> Cluster:
    """This rank's `TF_CONFIG`: its cluster (one `worker` job) and its task index.

    Raises:
      ValueError: `TF_CONFIG` is missing or names no worker job or task.
    """
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise ValueError("TF_CONFIG is not set: benchmarks.exchange_latency starts this rank with its cluster")
    config = json.loads(raw)
    workers = config.get("cluster", {}).get(JOB)
    task = config.get("task", {})
    if not workers or task.get("type") != JOB or not 0 <= int(task.get("index", -1)) < len(workers):
        raise ValueError("TF_CONFIG %r: needs cluster.worker and a task of type worker with an index in it" % raw)
    return {"workers": list(workers), "index": int(task["index"])}


def code(sender: int, receiver: int) -> float:
    """The value every element sent by `sender` to `receiver` carries in the check."""
    return SENDER_SCALE * (sender + 1) + receiver


def check_payload(rank: int, size: int, rows: int, width: int) -> np.ndarray:
    """`[size, rows, width]`: slice i filled with `code(rank, i)`."""
    return np.stack([np.full((rows, width), code(rank, i), np.float32) for i in range(size)])


def expected(variant: str, rank: int, size: int, rows: int, width: int) -> np.ndarray:
    """What `variant` must return on `rank` when every rank sent its `check_payload`."""
    if variant == "tf_collective_alltoall":
        return np.stack([np.full((rows, width), code(j, rank), np.float32) for j in range(size)])
    if variant == "tf_collective_gather":
        return np.concatenate([np.full((rows, width), code(j, 0), np.float32) for j in range(size)])
    if variant == "tf_collective_reduce":
        return np.concatenate([np.full((rows, width), sum(code(j, i) for j in range(size)), np.float32)
                               for i in range(size)])
    raise ValueError("no check for variant %r" % variant)


def received_from(variant: str, result: np.ndarray, size: int, rows: int) -> List[List[float]]:
    """Per peer j: [min, max] of the part of `result` that came from (or, for reduce, belongs to) j."""
    chunks = result.reshape(size, rows, -1)
    return [[float(chunk.min()), float(chunk.max())] for chunk in chunks]


def session_config(rank: int):
    """The rank's ConfigProto: the collective runtime's leader, its own devices, one thread per op and pool."""
    import tensorflow as tf
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    config.experimental.collective_group_leader = "/job:%s/replica:0/task:0" % JOB
    config.device_filters.append("/job:%s/task:%d" % (JOB, rank))
    return config


def run_variants(workers: List[str], rank: int, exchange: exchange_latency_rank.Exchange) -> Dict[str, object]:
    """Times every variant on this rank, after checking each collective's values; every rank must call it."""
    rows, width, iterations, warmup = exchange.rows, exchange.width, exchange.iterations, exchange.warmup
    import tensorflow as tf
    size = len(workers)
    config = session_config(rank)
    server = tf.distribute.Server(tf.train.ClusterSpec({JOB: workers}), job_name=JOB, task_index=rank,
                                  protocol="grpc", config=config)
    device = "/job:%s/replica:0/task:%d/device:CPU:0" % (JOB, rank)
    results: Dict[str, dict] = {}
    checks: Dict[str, List[List[float]]] = {}
    payload = check_payload(rank, size, rows, width)
    with tf.Graph().as_default(), tf.device(device):
        data = tf.compat.v1.placeholder(tf.float32, [size, rows, width])
        flat = tf.reshape(data, [size * rows, width])

        def keys(name):
            return dict(group_size=size, group_key=GROUP_KEY, instance_key=INSTANCE_KEYS[name], ordering_token=[])

        barrier = tf.raw_ops.CollectiveReduceV2(input=tf.constant([1.0]), merge_op="Add", final_op="Id",
                                                **keys("barrier"))
        collectives = [
            ("tf_collective_alltoall", tf.raw_ops.CollectiveAllToAllV2(input=data, **keys("tf_collective_alltoall"))),
            # Each rank's part: the slice it sends rank 0, so the check names the sender.
            ("tf_collective_gather", tf.raw_ops.CollectiveGatherV2(input=data[0], **keys("tf_collective_gather"))),
            ("tf_collective_reduce", tf.raw_ops.CollectiveReduceV2(input=flat, merge_op="Add", final_op="Id",
                                                                   **keys("tf_collective_reduce"))),
        ]
        ops = [("session", tf.identity(data))] + collectives
        collective_run = tf.compat.v1.RunOptions()
        collective_run.experimental.collective_graph_key = COLLECTIVE_GRAPH_KEY
        with tf.compat.v1.Session(server.target, config=config) as session:
            for name, op in ops:
                session.run(barrier, options=collective_run)
                options = None if name == "session" else collective_run
                if options is not None:
                    result = session.run(op, {data: payload}, options=options)
                    want = expected(name, rank, size, rows, width)
                    if result.shape != want.shape or not np.array_equal(result, want):
                        raise AssertionError("rank %d, %s: received %s, expected every element of the part from "
                                             "rank j to be %s" % (rank, name, received_from(name, result, size, rows),
                                                                  [float(w.flat[0]) for w in want.reshape(size, -1)]))
                    checks[name] = received_from(name, result, size, rows)

                def run(i, op=op, options=options):
                    del i
                    session.run(op, {data: payload}, options=options)
                results[name] = exchange_latency_rank.time_runs(run, iterations, warmup)
            session.run(barrier, options=collective_run)
    for result in results.values():
        result["bytes_sent"] = (size - 1) * rows * width * 4
    return {"results": results, "checks": checks}


def finish(output_dir: str, rank: int, size: int, record: dict) -> None:
    """Writes this rank's JSON, then waits until every rank has written its own.

    Raises:
      TimeoutError: some rank wrote nothing within `FINISH_TIMEOUT_S`.
    """
    path = os.path.join(output_dir, "rank%d.json" % rank)
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)
    paths = [os.path.join(output_dir, "rank%d.json" % r) for r in range(size)]
    deadline = time.monotonic() + FINISH_TIMEOUT_S
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() > deadline:
            raise TimeoutError("rank %d: ranks %s wrote nothing to %s within %.0f s" % (
                rank, [r for r, p in enumerate(paths) if not os.path.exists(p)], output_dir, FINISH_TIMEOUT_S))
        time.sleep(FINISH_POLL_S)


def main(argv):
    del argv
    cluster = cluster_from_env()
    exchange = exchange_latency_rank.Exchange(**config_flags.values(exchange_latency_rank.Exchange, FLAGS))
    record = run_variants(cluster["workers"], cluster["index"], exchange)
    record.update(controller="tf", rank=cluster["index"], peak_rss_mb=exchange_latency_rank.peak_rss_mb())
    options = CollectiveRankOptions(**config_flags.values(CollectiveRankOptions, FLAGS))
    finish(options.output_dir, cluster["index"], len(cluster["workers"]), record)
    sys.stdout.flush()


if __name__ == "__main__":
    define_flags()
    app.run(main)
