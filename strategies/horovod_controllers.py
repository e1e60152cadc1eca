"""Which Horovod controller started a rank, and whether the rank's Horovod was built with it.

The local launcher does not let horovodrun check Horovod's build before it
starts the ranks (`jobs.local.horovod_runner`: the check imports
TensorFlow in a forked process); each rank checks its own Horovod instead,
before `hvd.init()` (`checked_horovod`, called by `strategies.horovod`).
Importing this module imports neither TensorFlow nor Horovod.
"""

from typing import Mapping, Optional

# Horovod's controllers, how a rank tells which one started it, and how to build Horovod with each.
GLOO = "gloo"
MPI = "mpi"
CONTROLLER_ENV = "HOROVOD_CONTROLLER"
GLOO_RENDEZVOUS_ENV = "HOROVOD_GLOO_RENDEZVOUS_ADDR"
# The size of the job as MPI launchers give it to each rank: Open MPI, then MPICH and Intel MPI.
MPI_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
BUILD_FLAGS = {GLOO: "HOROVOD_WITH_GLOO=1 (with CMake installed)", MPI: "HOROVOD_WITH_MPI=1 (with MPI installed)"}
INSTALL_HINT = (
    "install it with TensorFlow and Gloo support, e.g. "
    "HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 pip install 'horovod[tensorflow]==0.28.1' "
    "(the 'horovod' extra of this package), and start the ranks with horovodrun")


def import_horovod():
    """Imports and returns `horovod.tensorflow`.

    Raises:
      ImportError: Horovod or its TensorFlow extension is missing; the
        message says how to install it.
    """
    try:
        import horovod.tensorflow as hvd
    except ImportError as e:
        raise ImportError("--strategy horovod needs Horovod (%s): %s" % (e, INSTALL_HINT)) from e
    return hvd


def checked_horovod(environ: Mapping[str, str]):
    """`horovod.tensorflow`, once this rank's launcher's controller is one its Horovod was built with.

    Raises:
      ImportError: Horovod is not installed (`import_horovod`).
      ValueError: the controller is one Horovod was built without
        (`unbuilt_controller`'s message).
    """
    hvd = import_horovod()
    unbuilt = unbuilt_controller(environ, {GLOO: hvd.gloo_built(), MPI: hvd.mpi_built()})
    if unbuilt:
        raise ValueError(unbuilt)
    return hvd


def launched_controller(environ: Mapping[str, str]) -> Optional[str]:
    """The controller the launcher of this rank started it for, `GLOO` or `MPI`; None where no launcher did."""
    named = environ.get(CONTROLLER_ENV)
    if named in (GLOO, MPI):
        return named
    if environ.get(GLOO_RENDEZVOUS_ENV):
        return GLOO
    if any(environ.get(variable) for variable in MPI_SIZE_VARIABLES):
        return MPI
    return None


def unbuilt_controller(environ: Mapping[str, str], built: Mapping[str, bool]) -> Optional[str]:
    """Why this rank cannot start: its launcher's controller is one its Horovod was built without; else None.

    Args:
      environ: the rank's environment.
      built: per controller (`GLOO`, `MPI`), whether Horovod was built with
        it (`hvd.gloo_built()`, `hvd.mpi_built()`).
    """
    controller = launched_controller(environ)
    if controller is None or built[controller]:
        return None
    other = MPI if controller == GLOO else GLOO
    return ("this rank was started for Horovod's %s controller, and the Horovod installed here was built without "
            "it: reinstall Horovod with %s, or start the ranks over %s (deepfm.launch --horovod_controller %s)"
            % (controller, BUILD_FLAGS[controller], other, other))
