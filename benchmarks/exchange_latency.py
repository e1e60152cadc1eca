"""What one exchange costs between ranks pinned to their cores: Horovod, MPI directly, TensorFlow's collectives.

    python -m benchmarks.exchange_latency [--ranks 2] [--rows 5000] [--width 33] [--runs 3]
                                          [--cycle_times 1,0.1] [--controllers gloo,mpi,tf]
                                          [--name exchange_latency]

A step of `hybrid` waits on the exchanges of its critical path. This
measures one exchange on its own: each rank pinned to its own core runs one
exchange per `session.run`, `--runs` rounds with every launch interleaved:

* `gloo`, `mpi` and `mpi_yield`, once per Horovod cycle time: ranks of
  `benchmarks.exchange_latency_rank` under `horovodrun --gloo` or `mpirun`
  (`mpi_yield`: with `-mca mpi_yield_when_idle 1`, a rank that waits in
  MPI gives its core up instead of spinning on it).
  The variants (that module's docstring): an exchange of a fixed shape (which
  Horovod's response cache holds), of a shape that changes every run (a full
  negotiation), an allreduce of the same bytes, and MPI's own `Alltoall`,
  inside the step (`tf.numpy_function`) and alone (the transport's floor);
* `tf`: TensorFlow 2.14's own collective ops in graph mode, no Horovod
  (`benchmarks.exchange_latency_collective_rank`): this program starts the
  ranks itself, each with a `TF_CONFIG` naming a cluster of free local ports
  and its task, and each rank's `tf.distribute.Server` runs the collective
  runtime over gRPC. Variants: `CollectiveAllToAllV2` of the same fixed
  shape (it has a CPU kernel in 2.14, and its `AllToAll` implementation
  sends and receives through the collective executor's remote access, gRPC
  between tasks), `CollectiveGatherV2` of each rank's rows and
  `CollectiveReduceV2` of the allreduce's bytes. Before timing, every rank
  checks every value it received.

Writes `benchmarks/results/<name>.md` and `.json`: per launch and variant the
median wall time of one run (min-max over rounds) and the CPU time of one run
summed over the rank's threads; the JSON also holds what each `tf` rank
received from each peer in its check.
"""

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

from absl import app, flags

from benchmarks import common
from cli import entry
from jobs.local import processes

FLAGS = flags.FLAGS
RANK_MODULE = "benchmarks.exchange_latency_rank"
COLLECTIVE_RANK_MODULE = "benchmarks.exchange_latency_collective_rank"
# Horovod's controllers (one launch per cycle time) and TensorFlow's collective runtime (one launch).
HOROVOD_CONTROLLERS = ("gloo", "mpi", "mpi_yield")
# The mpirun options of each MPI launch.
MPI_OPTIONS = {"mpi": (), "mpi_yield": ("-mca", "mpi_yield_when_idle", "1")}
COLLECTIVES = "tf"
CONTROLLERS = HOROVOD_CONTROLLERS + (COLLECTIVES,)
COLLECTIVES_LAUNCH = "tf collectives, grpc"
LAUNCH_TIMEOUT_S = 600
VARIANT_ORDER = ("idle_10ms", "session", "horovod_alltoall_fixed", "horovod_alltoall_variable", "horovod_allreduce",
                 "mpi_alltoall_in_session", "mpi_alltoall", "tf_collective_alltoall", "tf_collective_gather",
                 "tf_collective_reduce")


def define_flags() -> None:
    flags.DEFINE_integer("ranks", 2, "Ranks, each pinned to its own core (the machine needs as many).")
    flags.DEFINE_integer("rows", 5000, "Rows each rank sends every rank per exchange.")
    flags.DEFINE_integer("width", 33, "Floats per row.")
    flags.DEFINE_integer("iterations", 300, "Timed exchanges per variant and round.")
    flags.DEFINE_integer("warmup", 30, "Untimed exchanges per variant and round.")
    flags.DEFINE_integer("runs", 3, "Rounds; each starts every launch afresh.")
    flags.DEFINE_list("cycle_times", ["1", "0.1"], "Horovod cycle times to measure, in ms.")
    flags.DEFINE_list("controllers", list(CONTROLLERS),
                      "gloo (horovodrun --gloo), mpi (mpirun), mpi_yield (mpirun -mca mpi_yield_when_idle 1) "
                      "and/or tf (TensorFlow's collective ops over gRPC, "
                      "ranks started by this program).")
    flags.DEFINE_string("name", "exchange_latency", "Results name.")
    flags.DEFINE_string("results_dir", common.RESULTS_DIR, "Where the results go.")


def launch_argv(controller: str, ranks: int, rank_flags: Sequence[str]) -> List[str]:
    """The command that starts `ranks` rank processes, rank r pinned to core r."""
    bin_dir = os.path.dirname(sys.executable)
    if controller in MPI_OPTIONS:
        pin = "exec taskset -c $OMPI_COMM_WORLD_RANK %s -m %s %s" % (sys.executable, RANK_MODULE, " ".join(rank_flags))
        return (["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
                + list(MPI_OPTIONS[controller])
                + ["-x", "PYTHONPATH", "-x", "HOROVOD_CYCLE_TIME", "-x", "TF_CPP_MIN_LOG_LEVEL", "bash", "-c", pin])
    pin = "exec taskset -c $HOROVOD_RANK %s -m %s %s" % (sys.executable, RANK_MODULE, " ".join(rank_flags))
    return [os.path.join(bin_dir, "horovodrun"), "--gloo", "-np", str(ranks), "-H", "localhost:%d" % ranks,
            "bash", "-c", pin]


def collective_rank_argv(rank: int, rank_flags: Sequence[str]) -> List[str]:
    """The command of TensorFlow collective rank `rank`, pinned to core `rank`."""
    return ["taskset", "-c", str(rank), sys.executable, "-m", COLLECTIVE_RANK_MODULE] + list(rank_flags)


def collective_tf_config(workers: Sequence[str], rank: int) -> str:
    """Rank `rank`'s `TF_CONFIG`: the cluster's one `worker` job and its own task."""
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": rank}})


def measure_collectives(ranks: int, rows: int, width: int, iterations: int,
                        warmup: int) -> Tuple[Dict[str, dict], List[dict]]:
    """One launch of TensorFlow collective ranks on free local ports.

    Returns:
      Every variant's result on rank 0, and each rank's checks (what it
      received from each peer), in rank order.

    Raises:
      processes.TaskFailedError: a rank failed (its log's tail in the message).
      TimeoutError: the ranks ran past `LAUNCH_TIMEOUT_S`.
    """
    work = tempfile.mkdtemp(prefix="exchange-latency-tf-")
    try:
        host = "localhost"
        workers = ["%s:%d" % (host, port) for port in processes.free_ports(ranks, host=host)]
        rank_flags = ["--rows=%d" % rows, "--width=%d" % width, "--iterations=%d" % iterations,
                      "--warmup=%d" % warmup, "--output_dir=" + work]
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                   PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        with processes.ProcessGroup(os.path.join(work, "logs")) as group:
            for rank in range(ranks):
                group.start("rank%d" % rank, collective_rank_argv(rank, rank_flags),
                            env=dict(env, TF_CONFIG=collective_tf_config(workers, rank)))
            group.wait(timeout=LAUNCH_TIMEOUT_S)
        records = []
        for rank in range(ranks):
            with open(os.path.join(work, "rank%d.json" % rank)) as f:
                records.append(json.load(f))
        return records[0]["results"], [record["checks"] for record in records]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(controller: str, cycle_time: str, ranks: int, rows: int, width: int, iterations: int,
            warmup: int) -> Dict[str, dict]:
    """One launch: every variant's result on rank 0."""
    work = tempfile.mkdtemp(prefix="exchange-latency-")
    try:
        output = os.path.join(work, "rank0.json")
        rank_controller = "mpi" if controller in MPI_OPTIONS else controller
        rank_flags = ["--controller=" + rank_controller, "--rows=%d" % rows, "--width=%d" % width,
                      "--iterations=%d" % iterations, "--warmup=%d" % warmup, "--output=" + output]
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, HOROVOD_CYCLE_TIME=cycle_time, TF_CPP_MIN_LOG_LEVEL="2",
                   PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        completed = subprocess.run(launch_argv(controller, ranks, rank_flags), env=env, cwd=root,
                                   capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
        if completed.returncode != 0 or not os.path.exists(output):
            raise RuntimeError("%s launch (cycle %s ms) failed with exit code %d:\n%s" % (
                controller, cycle_time, completed.returncode, (completed.stdout + completed.stderr)[-3000:]))
        with open(output) as f:
            return json.load(f)["results"]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def summarize(rounds: Dict[str, List[Dict[str, dict]]]) -> Dict[str, Dict[str, dict]]:
    """Per launch and variant: the rounds' medians as `Stats` values (wall and CPU, microseconds)."""
    summary: Dict[str, Dict[str, dict]] = {}
    for launch, results in rounds.items():
        summary[launch] = {}
        for variant in VARIANT_ORDER:
            if variant not in results[0]:
                continue
            summary[launch][variant] = {
                "wall_us": [r[variant]["median_us"] for r in results],
                "cpu_us": [r[variant]["cpu_us_per_run"] for r in results],
                "p90_us": [r[variant]["p90_us"] for r in results]}
    return summary


def report(summary: Dict[str, Dict[str, dict]], config: dict, info: Dict[str, str], name: str,
           results_dir: str, checks: Optional[Dict[str, list]] = None) -> str:
    """Writes the markdown and JSON reports; returns the markdown body."""
    rows = []
    for launch, variants in summary.items():
        for variant, values in variants.items():
            rows.append([launch, "`%s`" % variant, common.Stats(values["wall_us"]).fmt(",.0f"),
                         common.Stats(values["p90_us"]).fmt(",.0f"), common.Stats(values["cpu_us"]).fmt(",.0f")])
    body = ("Ranks: %(ranks)d, each pinned to its own core; an exchange sends %(rows)d rows of %(width)d float32 "
            "to every rank (%(bytes)s bytes to each other rank); %(iterations)d timed runs per variant after "
            "%(warmup)d, %(runs)d rounds (each a new launch). One `session.run` per exchange. Wall: median of "
            "one run on rank 0 (min-max over rounds); p90: the 90th percentile of one run; CPU: rank 0's "
            "process CPU per run, every thread. Launch `%(tf)s`: TensorFlow's own collective ops in graph "
            "mode between `tf.distribute.Server`s, no Horovod.\n\n"
            % dict(config, bytes=format(config["rows"] * config["width"] * 4, ","), tf=COLLECTIVES_LAUNCH))
    body += common.markdown_table(["launch", "variant", "wall us", "p90 us", "CPU us per run"], rows)
    command = ("python -m benchmarks.exchange_latency --ranks %(ranks)d --rows %(rows)d --width %(width)d "
               "--iterations %(iterations)d --warmup %(warmup)d --runs %(runs)d --cycle_times %(cycle_times)s "
               "--controllers %(controllers)s --name %(name)s" % dict(
                   config, cycle_times=",".join(config["cycle_times"]), controllers=",".join(config["controllers"])))
    common.write_report(name, "One exchange between ranks", body + "\n\nCommand: `%s`\n" % command, info,
                        {"config": config, "summary": summary, "checks": checks or {}}, results_dir=results_dir)
    return body


def main(argv):
    del argv
    config = dict(ranks=FLAGS.ranks, rows=FLAGS.rows, width=FLAGS.width, iterations=FLAGS.iterations,
                  warmup=FLAGS.warmup, runs=FLAGS.runs, cycle_times=list(FLAGS.cycle_times),
                  controllers=list(FLAGS.controllers), name=FLAGS.name)
    for controller in FLAGS.controllers:
        if controller not in CONTROLLERS:
            raise app.UsageError("--controllers: %r is not one of %s" % (controller, ", ".join(CONTROLLERS)))
    if FLAGS.ranks > (os.cpu_count() or 1):
        raise app.UsageError("--ranks %d: this machine has %d cores, one per rank is needed"
                             % (FLAGS.ranks, os.cpu_count() or 1))
    info = common.machine_info()
    rounds: Dict[str, List[Dict[str, dict]]] = {}
    checks: Dict[str, list] = {}
    horovod = [c for c in FLAGS.controllers if c in HOROVOD_CONTROLLERS]
    launches = list(itertools.product(horovod, FLAGS.cycle_times))
    if COLLECTIVES in FLAGS.controllers:
        launches.append((COLLECTIVES, None))
    for round_index in range(FLAGS.runs):
        for controller, cycle_time in launches:
            if controller == COLLECTIVES:
                launch = COLLECTIVES_LAUNCH
                print("round %d: %s" % (round_index + 1, launch), flush=True)
                results, rank_checks = measure_collectives(FLAGS.ranks, FLAGS.rows, FLAGS.width, FLAGS.iterations,
                                                           FLAGS.warmup)
                checks.setdefault(launch, []).append(rank_checks)
            else:
                launch = "%s, cycle %s ms" % (controller, cycle_time)
                print("round %d: %s" % (round_index + 1, launch), flush=True)
                results = measure(controller, cycle_time, FLAGS.ranks, FLAGS.rows, FLAGS.width, FLAGS.iterations,
                                  FLAGS.warmup)
            rounds.setdefault(launch, []).append(results)
    print(report(summarize(rounds), config, info, FLAGS.name, FLAGS.results_dir, checks))


if __name__ == "__main__":
    # `--help` ends with status 0 and a bad flag with one line, as every command line of the project.
    entry.run(main, "benchmarks.exchange_latency", define_flags, entry.NO_TENSORFLOW)
