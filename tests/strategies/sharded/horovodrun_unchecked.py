"""`horovodrun` without its check that Horovod was built with Gloo: what the tests start ranks with.

    python -m tests.strategies.sharded.horovodrun_unchecked --gloo -np 2 -H localhost:2 python -m ...

is `horovodrun --gloo -np 2 ...` (the same `horovod.runner.launch`, its
rendezvous server and rank processes), less one thing: before it starts
the ranks, horovodrun imports `horovod.tensorflow` (and so TensorFlow) in a
forked process to ask whether it was built with Gloo, about 3 s of CPU per
launch. The ranks import it anyway, and a Horovod without Gloo fails there
(`hvd.init` under the Gloo rendezvous), so the tests lose no check.
"""

from horovod.runner import launch


def main() -> None:
    launch.gloo_built = lambda verbose=False: True
    launch.run_commandline()


if __name__ == "__main__":
    main()
