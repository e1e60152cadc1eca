"""What starting Horovod ranks costs: the installed `horovodrun` against the launcher `deepfm.launch` starts.

    python -m benchmarks.horovod_launch [--ranks 2] [--rounds 5] [--results_dir DIR]

Every start and every restart of a local Horovod job goes through Horovod's
launcher. Two of them, each with Gloo and (where `mpirun` is installed)
with MPI, start `--ranks` ranks of a program that does nothing (so that the
launcher's own cost is all there is to see):

* `horovodrun_<controller>`: the installed `horovodrun --gloo` or `--mpi`,
  which first asks whether Horovod was built with that controller by
  importing `horovod.tensorflow` (and so TensorFlow) in a forked process;
* `runner_<controller>`: `jobs.local.horovod_runner`, the same launcher
  less that check (each rank makes it instead, `strategies.horovod`), as
  `deepfm.launch` starts it.

Each round runs each variant once in a fresh process, interleaved.
Reported: the launch's wall seconds and the CPU seconds of its whole
process tree (launcher, check, ranks), min/median/max over the rounds,
each round's ratio to the first variant, and the peak resident memory of
its largest process. Writes `horovod_launch.{md,json}` to `--results_dir`
(default `benchmarks/results/`, the committed results: a trial run names
another directory).
"""

import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from typing import List

from benchmarks import common, harness
from cli import config_flags
from jobs.local import horovod_runner

NAME = "horovod_launch"
GLOO = "gloo"
MPI = "mpi"
INSTALLED = "horovodrun"
RUNNER = "runner"
WALL_S = "wall_s"
CPU_S = "cpu_s"
METRICS = (WALL_S, CPU_S)
CHILD_TIMEOUT_S = 300
# The ranks' program: nothing but the interpreter's start.
RANK_PROGRAM = ["-c", "pass"]
# What `deepfm.launch` gives mpirun (`jobs.local.launcher.MPI_YIELD_ARGS`): the same for both launchers.
MPI_ARGS = ["--mpi-args=-mca mpi_yield_when_idle 1"]
MIB = 1024


def variant_names(with_mpi: bool) -> List[str]:
    """Every variant, the installed horovodrun first (the baseline); MPI's only `with_mpi`."""
    controllers = [GLOO] + ([MPI] if with_mpi else [])
    return ["%s_%s" % (launcher, controller) for controller in controllers for launcher in (INSTALLED, RUNNER)]


@dataclasses.dataclass(frozen=True)
class HorovodLaunchConfig(harness.HarnessConfig):
    """The benchmark's options (its flags)."""

    ranks: int = config_flags.field(2, "Ranks each launch starts on this host.")
    one: str = config_flags.field("", "Internal: run this variant's launch once in this process and print what "
                                      "it cost as JSON.")

    def __post_init__(self):
        super().__post_init__()
        if self.ranks < 1:
            raise ValueError("--ranks must be >= 1, got %d" % self.ranks)
        if self.one and self.one not in variant_names(with_mpi=True):
            raise ValueError("--one must be one of %s, got %r" % (", ".join(variant_names(True)), self.one))


def launch_command(variant: str, ranks: int, python: str = sys.executable) -> List[str]:
    """The command line of `variant`'s launch of `ranks` ranks on this host."""
    launcher, controller = variant.split("_", 1)
    if launcher == INSTALLED:
        start = [os.path.join(os.path.dirname(python), INSTALLED)]
    else:
        start = horovod_runner.command(python)
    return (start + ["--" + controller] + (MPI_ARGS if controller == MPI else [])
            + ["-np", str(ranks), "-H", "localhost:%d" % ranks, python] + RANK_PROGRAM)


def launch_once(variant: str, ranks: int) -> dict:
    """Runs `variant`'s launch in this process's child; its wall and CPU seconds and its largest process's memory."""
    command = launch_command(variant, ranks)
    started = time.monotonic()
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=CHILD_TIMEOUT_S)
    wall_s = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(command), result.returncode, result.stdout[-2000:]))
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {WALL_S: wall_s, CPU_S: usage.ru_utime + usage.ru_stime, harness.PEAK_RSS_MB: usage.ru_maxrss / MIB}


@dataclasses.dataclass
class LaunchVariant(harness.Variant):
    """One launcher and controller, in a fresh process per round."""

    name: str
    config: HorovodLaunchConfig

    def measure(self, round_index: int) -> harness.Measurement:
        out = common.run_json_subprocess(["-m", "benchmarks.horovod_launch", "--ranks", str(self.config.ranks),
                                          "--one", self.name], timeout=CHILD_TIMEOUT_S)
        return harness.Measurement({WALL_S: out[WALL_S], CPU_S: out[CPU_S]}, out[harness.PEAK_RSS_MB])


def benchmark(config: HorovodLaunchConfig) -> int:
    """Runs the benchmark (or, with `one`, one variant's launch); returns the exit status."""
    if config.one:
        print(json.dumps(launch_once(config.one, config.ranks)))
        return 0
    names = variant_names(with_mpi=shutil.which("mpirun") is not None)
    variants = common.select_variants(config.variants or ",".join(names),
                                      [LaunchVariant(name, config) for name in names])
    results = harness.run(variants, config.rounds, config.warmup_rounds)
    body = (
        "Launches of %d ranks that do nothing on this host, %d rounds, each variant in a fresh process per round, "
        "interleaved; the launch's wall seconds and its process tree's CPU seconds, min/median/max over the "
        "rounds, and each round's ratio to %s.\n\n" % (config.ranks, results.rounds_run, results.baseline)
        + common.markdown_table(
            ["variant", "wall s median (min-max)", "ratio", "CPU s median (min-max)", "ratio",
             "peak RSS MiB (largest process)"], results.table_rows(METRICS)))
    harness.write(results, config, NAME, "Starting Horovod ranks: horovodrun against the launcher's runner", body,
                  harness.machine_record())
    print(body)
    return 1 if results.failures else 0


if __name__ == "__main__":
    harness.main(HorovodLaunchConfig, benchmark)
