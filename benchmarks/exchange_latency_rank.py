"""One rank of `benchmarks.exchange_latency`: one exchange after another, each its own `session.run`.

Started by `benchmarks.exchange_latency` under `mpirun` (Horovod's MPI
controller, and MPI itself through mpi4py) or `horovodrun --gloo`, one rank
per core. Each variant is timed over `--iterations` runs after `--warmup`,
the ranks agreeing (a barrier) before each variant; rank 0 writes one JSON
object with every variant's wall time and this process's CPU time per run
(every thread: TensorFlow's, Horovod's background thread, Gloo's or MPI's).

Variants (an exchange of `--rows` rows of `--width` float32 to every rank):

* `idle_10ms`: no run at all, 10 ms of sleep: the CPU the process spends
  while the model computes and nothing is queued (Horovod's background
  thread coordinates its ranks every cycle, and MPI may spin meanwhile);
* `session`: a `session.run` that exchanges nothing (what every run costs);
* `horovod_alltoall_fixed`: `hvd.alltoall`, the same shape every run (Horovod's
  response cache holds it);
* `horovod_alltoall_variable`: the same, but the shape changes every run (a
  full negotiation each time), as the distinct ids of a batch do;
* `horovod_allreduce`: `hvd.allreduce` of the same bytes, fixed shape;
* `mpi_alltoall_in_session` (MPI only): the same exchange by MPI directly
  (mpi4py's `Alltoall`), inside the step through `tf.numpy_function`;
* `mpi_alltoall` (MPI only): mpi4py's `Alltoall` alone, no TensorFlow: the
  transport's floor.
"""

import dataclasses
import json
import os
import resource
import sys
import time
from typing import Callable, Dict, List

import numpy as np
from absl import app, flags

from cli import config_flags

FLAGS = flags.FLAGS
CONTROLLERS = ("mpi", "gloo")
MICROS = 1e6
IDLE_SECONDS = 0.010


@dataclasses.dataclass(frozen=True)
class Exchange:
    """What every rank exchanges and how often; `benchmarks.exchange_latency` passes each field as a flag."""

    rows: int = dataclasses.field(metadata=config_flags.metadata("Rows sent to every rank per exchange."))
    width: int = dataclasses.field(metadata=config_flags.metadata(
        "Floats per row (DeepFM's weight and factors at embedding 32)."))
    iterations: int = dataclasses.field(metadata=config_flags.metadata("Timed runs per variant."))
    warmup: int = dataclasses.field(metadata=config_flags.metadata("Untimed runs per variant first."))

    def flags(self) -> List[str]:
        """The rank flags that carry these values."""
        return ["--%s=%d" % (item.name, getattr(self, item.name)) for item in dataclasses.fields(self)]


@dataclasses.dataclass(frozen=True)
class RankOptions:
    """A Horovod rank's own flags beside `Exchange`'s."""

    controller: str = dataclasses.field(metadata=config_flags.metadata(
        "How the ranks were started (mpirun: mpi).", choices=CONTROLLERS))
    output: str = dataclasses.field(metadata=config_flags.metadata("Rank 0 writes its JSON object here."))


def define_flags() -> None:
    # Every one required: the launching benchmark gives them all.
    config_flags.define_flags([Exchange, RankOptions])
    flags.mark_flags_as_required(config_flags.required_flags([Exchange, RankOptions]))


def peak_rss_mb() -> float:
    """This rank's peak resident memory so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def time_runs(run: Callable[[int], None], iterations: int, warmup: int) -> Dict[str, object]:
    """`run(i)` `warmup` times, then `iterations` timed: wall percentiles and this process's CPU per run."""
    for i in range(warmup):
        run(i)
    walls: List[float] = []
    cpu = _cpu_seconds()
    for i in range(iterations):
        start = time.perf_counter()
        run(warmup + i)
        walls.append(time.perf_counter() - start)
    cpu = _cpu_seconds() - cpu
    walls_us = np.array(walls) * MICROS
    return {"median_us": float(np.median(walls_us)), "p10_us": float(np.percentile(walls_us, 10)),
            "p90_us": float(np.percentile(walls_us, 90)), "cpu_us_per_run": cpu * MICROS / iterations}


def run_variants(controller: str, exchange: Exchange) -> Dict[str, dict]:
    """Times every variant on this rank; every rank must call it."""
    rows, width, iterations, warmup = exchange.rows, exchange.width, exchange.iterations, exchange.warmup
    comm = None
    if controller == "mpi":
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    import horovod.tensorflow as hvd
    import tensorflow as tf
    hvd.init()
    size = hvd.size()
    rng = np.random.RandomState(hvd.rank())
    # Variable shapes: each run sends every rank between 0.9 and 1.1 x rows, a new count each run.
    most = int(rows * 1.1) + 1
    counts = [rng.randint(int(rows * 0.9), most) for _ in range(warmup + iterations)]
    payload = rng.randn(size * most, width).astype(np.float32)
    results = {}
    with tf.Graph().as_default():
        data = tf.compat.v1.placeholder(tf.float32, [None, width])
        splits = tf.compat.v1.placeholder(tf.int32, [size])
        fixed, _ = hvd.alltoall(data, splits=splits, name="fixed")
        variable, _ = hvd.alltoall(data, splits=splits, name="variable")
        reduced = hvd.allreduce(data, name="allreduce", op=hvd.Sum)
        barrier = hvd.allreduce(tf.constant(1.0), name="barrier")
        local = tf.identity(data)
        ops = [("session", local, lambda i: rows), ("horovod_alltoall_fixed", fixed, lambda i: rows),
               ("horovod_alltoall_variable", variable, lambda i: counts[i]),
               ("horovod_allreduce", reduced, lambda i: rows)]
        if comm is not None:
            def mpi_alltoall(array):
                received = np.empty_like(array)
                comm.Alltoall(array, received)
                return received
            in_session = tf.numpy_function(mpi_alltoall, [data], tf.float32)
            ops.append(("mpi_alltoall_in_session", in_session, lambda i: rows))
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
        with tf.compat.v1.Session(config=config) as session:
            session.run(barrier)
            results["idle_10ms"] = time_runs(lambda i: time.sleep(IDLE_SECONDS), iterations, warmup)
            for name, op, count in ops:
                session.run(barrier)

                def run(i, op=op, count=count):
                    n = count(i)
                    session.run(op, {data: payload[:size * n], splits: [n] * size})
                results[name] = time_runs(run, iterations, warmup)
    if comm is not None:
        comm.Barrier()
        send = payload[:size * rows]
        receive = np.empty_like(send)
        results["mpi_alltoall"] = time_runs(lambda i: comm.Alltoall(send, receive), iterations, warmup)
    for name, result in results.items():
        result["bytes_sent"] = 0 if name == "idle_10ms" else (size - 1) * rows * width * 4
    return results


def main(argv):
    del argv
    options = RankOptions(**config_flags.values(RankOptions, FLAGS))
    results = run_variants(options.controller, Exchange(**config_flags.values(Exchange, FLAGS)))
    rank = int(os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    if rank == 0:
        with open(options.output, "w") as f:
            json.dump({"controller": options.controller, "cycle_time_ms": os.environ.get("HOROVOD_CYCLE_TIME", "1"),
                       "results": results, "peak_rss_mb": peak_rss_mb()}, f)
    sys.stdout.flush()


if __name__ == "__main__":
    define_flags()
    app.run(main)
