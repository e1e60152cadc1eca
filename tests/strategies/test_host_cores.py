"""Tests of a host's cores and each rank's threads (`strategies.host_cores`)."""

import os

import tensorflow as tf

from strategies import host_cores


class ThreadsForRankTest(tf.test.TestCase):

    def test_ranks_of_a_host_share_its_vcpus(self):
        threads, reason = host_cores.threads_for_rank({"HOROVOD_LOCAL_SIZE": "4"}, 16)
        self.assertEqual(4, threads)
        self.assertIn("HOROVOD_LOCAL_SIZE=4 ranks share this host's 16 vCPUs", reason)
        self.assertEqual(2, host_cores.threads_for_rank({"OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, 16)[0])
        self.assertEqual(1, host_cores.threads_for_rank({"HOROVOD_LOCAL_SIZE": "4"}, 2)[0])
        self.assertIsNone(host_cores.threads_for_rank({"HOROVOD_LOCAL_SIZE": "1"}, 16))
        self.assertIsNone(host_cores.threads_for_rank({}, 16))


class PhysicalCoresTest(tf.test.TestCase):

    def test_this_machines_cores(self):
        cpus = sorted(os.sched_getaffinity(0))
        cores = host_cores.physical_cores()
        self.assertBetween(cores, 1, len(cpus))
        self.assertEqual(2, host_cores.physical_cores([10 ** 6, 10 ** 6 + 1]))
        # A host carved from this machine has its share of the physical cores.
        share = cores * 4 // len(cpus)
        self.assertEqual(share if 4 % max(1, share) == 0 else 4, host_cores.cores_of(4))


if __name__ == "__main__":
    tf.test.main()
