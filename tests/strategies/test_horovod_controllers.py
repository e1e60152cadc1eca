"""Tests of `strategies.horovod_controllers`: a rank checks that its Horovod has the controller it was started for."""

import shutil

import tensorflow as tf
from absl.testing import parameterized

from strategies import horovod_controllers as controllers


class UnbuiltControllerTest(tf.test.TestCase, parameterized.TestCase):
    """A rank checks that its Horovod has the controller it was started for (its launcher does not)."""

    GLOO_RANK = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_CONTROLLER": "gloo"}
    MPI_RANK = {"OMPI_COMM_WORLD_SIZE": "2"}

    @parameterized.named_parameters(
        ("gloo", GLOO_RANK, controllers.GLOO),
        ("gloo_by_its_rendezvous", {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1"}, controllers.GLOO),
        ("open_mpi", MPI_RANK, controllers.MPI),
        ("mpich", {"PMI_SIZE": "2"}, controllers.MPI),
        ("named", {"HOROVOD_CONTROLLER": "mpi", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1"}, controllers.MPI),
        ("no_launcher", {}, None),
    )
    def test_the_launchers_controller_is_read_from_the_environment(self, environ, controller):
        self.assertEqual(controller, controllers.launched_controller(environ))

    def test_a_controller_built_or_no_launcher_passes(self):
        every = {controllers.GLOO: True, controllers.MPI: True}
        self.assertIsNone(controllers.unbuilt_controller(self.GLOO_RANK, every))
        self.assertIsNone(controllers.unbuilt_controller(self.MPI_RANK, dict(every, gloo=False)))
        self.assertIsNone(controllers.unbuilt_controller({}, {controllers.GLOO: False, controllers.MPI: False}))

    def test_a_controller_built_without_names_the_rebuild_and_the_other_controller(self):
        built = {controllers.GLOO: False, controllers.MPI: True}
        self.assertEqual(
            "this rank was started for Horovod's gloo controller, and the Horovod installed here was built without "
            "it: reinstall Horovod with HOROVOD_WITH_GLOO=1 (with CMake installed), or start the ranks over mpi "
            "(deepfm.launch --horovod_controller mpi)", controllers.unbuilt_controller(self.GLOO_RANK, built))
        without_mpi = {controllers.GLOO: True, controllers.MPI: False}
        self.assertRegex(controllers.unbuilt_controller(self.MPI_RANK, without_mpi),
                         "started for Horovod's mpi controller.*HOROVOD_WITH_MPI=1.*--horovod_controller gloo")

    def test_the_installed_horovod_has_both(self):
        # What tools/setup_venv.sh builds where mpirun is installed, and what the launcher's `auto` relies on.
        try:
            hvd = controllers.import_horovod()
        except ImportError as e:
            self.skipTest("Horovod is not installed: %s" % e)
        self.assertTrue(hvd.gloo_built())
        self.assertEqual(bool(shutil.which("mpirun")), hvd.mpi_built())


if __name__ == "__main__":
    tf.test.main()
