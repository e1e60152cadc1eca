"""Tests of the replica device lists of the tower and mirrored strategies."""

import tensorflow as tf
from absl.testing import parameterized

from strategies import devices


class ResolveTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("cpu_count", 3, "cpu", 0, 8, "cpu", ("/cpu:1", "/cpu:2", "/cpu:3")),
        ("every_core_but_cpu0", 0, "cpu", 0, 4, "cpu", ("/cpu:1", "/cpu:2", "/cpu:3")),
        ("one_core_still_one_replica", 0, "cpu", 0, 1, "cpu", ("/cpu:1",)),
        ("auto_without_gpus", 2, "auto", 0, 8, "cpu", ("/cpu:1", "/cpu:2")),
        ("auto_with_gpus", 0, "auto", 2, 8, "gpu", ("/gpu:0", "/gpu:1")),
        ("some_gpus", 1, "gpu", 4, 8, "gpu", ("/gpu:0",)),
        ("cpu_despite_gpus", 2, "cpu", 4, 8, "cpu", ("/cpu:1", "/cpu:2")),
    )
    def test_devices(self, num_devices, device_type, gpus, cpus, want_type, want_devices):
        device_list = devices.resolve(num_devices, device_type, gpus=gpus, cpus=cpus)
        self.assertEqual(device_list.device_type, want_type)
        self.assertEqual(device_list.devices, want_devices)
        self.assertLen(device_list, len(want_devices))

    @parameterized.named_parameters(
        ("no_gpu", 0, "gpu", 0, "--device_type gpu: no GPU is visible"),
        ("too_many_gpus", 3, "gpu", 2, "--num_devices 3 asks for more GPUs than the 2 visible"),
        ("negative", -1, "cpu", 0, "--num_devices must be >= 0, got -1"),
        ("bad_type", 1, "tpu", 0, "--device_type must be one of auto, cpu, gpu, got 'tpu'"),
    )
    def test_bad_requests_are_refused(self, num_devices, device_type, gpus, message):
        with self.assertRaisesRegex(ValueError, message):
            devices.resolve(num_devices, device_type, gpus=gpus, cpus=4)

    @parameterized.named_parameters(
        ("cpu", devices.DeviceList("cpu", ("/cpu:1", "/cpu:2")), "/cpu:0", 3),
        ("one_gpu", devices.DeviceList("gpu", ("/gpu:0",)), "/gpu:0", 1),
        ("gpus", devices.DeviceList("gpu", ("/gpu:0", "/gpu:1")), "/cpu:0", 1),
    )
    def test_parameter_device_and_cpu_count(self, device_list, parameter_device, cpu_count):
        self.assertEqual(device_list.parameter_device, parameter_device)
        self.assertEqual(device_list.cpu_device_count, cpu_count)

    def test_defaults_read_the_host(self):
        self.assertEqual(devices.visible_gpus(), len(tf.config.list_physical_devices("GPU")))
        self.assertGreaterEqual(devices.host_cpus(), 1)
        device_list = devices.resolve(0, "cpu")
        self.assertLen(device_list, max(1, devices.host_cpus() - 1))


class SessionConfigTest(tf.test.TestCase):

    def test_copies_and_adds_the_devices(self):
        base = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=3)
        updated = devices.DeviceList("cpu", ("/cpu:1", "/cpu:2", "/cpu:3")).session_config(base)
        self.assertEqual(updated.device_count["CPU"], 4)
        self.assertTrue(updated.allow_soft_placement)
        self.assertEqual(updated.intra_op_parallelism_threads, 3)
        self.assertNotIn("CPU", base.device_count)
        self.assertFalse(base.allow_soft_placement)

    def test_a_session_gets_the_virtual_cpus(self):
        device_list = devices.resolve(3, "cpu", gpus=0, cpus=1)
        config = device_list.session_config(tf.compat.v1.ConfigProto())
        with tf.Graph().as_default():
            with tf.compat.v1.Session(config=config) as session:
                names = [d.name for d in session.list_devices() if d.device_type == "CPU"]
                with tf.device(device_list.devices[-1]):
                    product = tf.reduce_sum(tf.constant([2.0, 3.0]))
                self.assertEqual(session.run(product), 5.0)
        self.assertEqual(sorted(tf.DeviceSpec.from_string(n).device_index for n in names), [0, 1, 2, 3])


if __name__ == "__main__":
    tf.test.main()
