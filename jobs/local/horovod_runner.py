"""Horovod's own launcher, less its forked check of the build: how `deepfm.launch` starts Horovod ranks.

    python -m jobs.local.horovod_runner --gloo -np 2 -H localhost:2 python -m deepfm.train --strategy horovod ...

is `horovodrun --gloo -np 2 ...`: the same code (`horovod.runner.launch`,
the `horovodrun` console script's), arguments, Gloo rendezvous server or
`mpirun` command, and rank processes. One thing is left out. Before it
starts the ranks, horovodrun asks whether Horovod was built with the
controller it is about to use by importing `horovod.tensorflow`, and so
TensorFlow, in a forked process: seconds of CPU and of waiting, and
hundreds of MiB, at every start and every restart of a job
(`benchmarks.horovod_launch`), for an answer the ranks get anyway.
Each rank asks its own Horovod the same question before `hvd.init()`
(`strategies.horovod_controllers`) and fails with the fix.

The controller must be named (`--gloo` or `--mpi`): without one, horovodrun
chooses between them by that check. `--check-build` and `--help` are
horovodrun's own, answered as it answers them.
"""

import sys
from typing import Optional, Sequence

PROGRAM = "jobs.local.horovod_runner"
# Exit status of a command line refused before anything started (argparse's).
EXIT_USAGE = 2


def command(python: str) -> list:
    """The command line that starts this launcher with `python`, the interpreter of the ranks' environment."""
    return [python, "-m", PROGRAM]


def _built(verbose: bool = False) -> bool:
    """horovodrun's check of the build, answered by the ranks instead (see the module's docstring)."""
    del verbose
    return True


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Parses horovodrun's arguments with its own parser, then runs its launcher without the build check."""
    from horovod.runner import launch
    sys.argv = [PROGRAM] + list(sys.argv[1:] if argv is None else argv)
    args = launch.parse_args()
    if not (args.use_gloo or args.use_mpi):
        print("%s: error: name the controller, --gloo or --mpi (horovodrun would choose one by checking the "
              "build); got: %s" % (PROGRAM, " ".join(sys.argv[1:]) or "no arguments"), file=sys.stderr)
        sys.exit(EXIT_USAGE)
    launch.gloo_built = _built
    launch.mpi_built = _built
    launch.run_commandline()


if __name__ == "__main__":
    main()
