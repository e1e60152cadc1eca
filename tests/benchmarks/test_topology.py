"""Tests of the topology reader: `lscpu -e` texts saved from real machines, parsed, ordered and described."""

import tensorflow as tf

from benchmarks import topology
from benchmarks.scale_out import layout
from benchmarks.scale_out import variants as variants_lib
from strategies import strategy_names as names

# A 2-vCPU development machine (AMD EPYC under KVM): two cores of their own.
TWO_CORES = """\
CPU NODE SOCKET CORE L1d:L1i:L2:L3 ONLINE
  0    0      0    0 0:0:0:0          yes
  1    0      0    1 1:1:1:0          yes
"""
# 16 vCPUs, each its own core with private L1/L2 and one shared L3 (the machine of issue 33's table).
SIXTEEN = "CPU NODE SOCKET CORE L1d:L1i:L2:L3 ONLINE    MAXMHZ   MINMHZ\n" + "".join(
    "%3d    0      0 %4d %d:%d:%d:0          yes 3500.0000 800.0000\n" % (cpu, cpu, cpu, cpu, cpu)
    for cpu in range(16))
# 8 vCPUs on 4 hyperthreaded cores, the siblings numbered i and i + 4 (as on an ml.c5.2xlarge).
HYPERTHREADED = """\
CPU NODE SOCKET CORE L1d:L1i:L2:L3 ONLINE
  0    0      0    0 0:0:0:0          yes
  1    0      0    1 1:1:1:0          yes
  2    0      0    2 2:2:2:0          yes
  3    0      0    3 3:3:3:0          yes
  4    0      0    0 0:0:0:0          yes
  5    0      0    1 1:1:1:0          yes
  6    0      0    2 2:2:2:0          yes
  7    0      0    3 3:3:3:0          yes
"""
# An offline vCPU has no place; lscpu prints dashes.
WITH_OFFLINE = """\
CPU NODE SOCKET CORE L1d:L1i:L2:L3 ONLINE
  0    0      0    0 0:0:0:0          yes
  1    -      -    - :::               no
"""
# Some platforms have no NODE column.
NO_NODE = """\
CPU SOCKET CORE ONLINE
  0      0    0 yes
  1      0    0 yes
"""


class ParseTest(tf.test.TestCase):

    def test_cores_of_their_own(self):
        machine = topology.Topology.parse(TWO_CORES, "Model name: AMD EPYC\n")
        self.assertEqual({0: (0, 0, 0), 1: (0, 0, 1)}, machine.places)
        self.assertEqual([0, 1], machine.order([1, 0]))
        self.assertEqual(2, machine.physical_cores([0, 1]))
        self.assertEqual("2 vCPUs on 2 physical cores (1 socket(s), `lscpu -e`): no two vCPUs share a core",
                         machine.describe([0, 1]))
        sixteen = topology.Topology.parse(SIXTEEN)
        self.assertEqual(list(range(16)), sixteen.order(range(16)))
        self.assertEqual([], sixteen.shared_cores(range(16)))

    def test_hyperthreads_of_a_core_are_ordered_together(self):
        machine = topology.Topology.parse(HYPERTHREADED)
        self.assertEqual([0, 4, 1, 5, 2, 6, 3, 7], machine.order(range(8)))
        self.assertEqual([(0, 4), (1, 5), (2, 6), (3, 7)], machine.shared_cores(range(8)))
        self.assertEqual(4, machine.physical_cores(range(8)))
        self.assertIn("8 vCPUs on 4 physical cores", machine.describe(range(8)))
        self.assertIn("hyperthreads of one core: 0+4, 1+5, 2+6, 3+7", machine.describe(range(8)))
        # Two hosts of 4 vCPUs are two whole cores each, and a rank of 2 vCPUs one core.
        variant = variants_lib.Variant("hybrid", names.HYBRID, "").at_layout(4, 2)
        plan = layout.plan(variant, machine.order(range(8)))
        self.assertEqual(((0, 4, 1, 5), (2, 6, 3, 7)), plan.hosts)
        self.assertEqual((((0, 4), (1, 5)), ((2, 6), (3, 7))), plan.processes)
        self.assertEqual(["taskset", "--cpu-list", "2,6"], plan.pin(1, 0))

    def test_offline_vcpus_and_missing_columns(self):
        self.assertEqual({0: (0, 0, 0)}, topology.Topology.parse(WITH_OFFLINE).places)
        machine = topology.Topology.parse(NO_NODE)
        self.assertEqual({0: (0, 0, 0), 1: (0, 0, 0)}, machine.places)
        self.assertEqual([(0, 1)], machine.shared_cores([0, 1]))

    def test_text_that_is_not_lscpu_e_is_named(self):
        with self.assertRaisesRegex(ValueError, "lscpu -e: no CORE column in the header 'CPU NODE'"):
            topology.Topology.parse("CPU NODE\n0 0\n")
        with self.assertRaisesRegex(ValueError, "lscpu -e line 2: CORE 'x' is not a number"):
            topology.Topology.parse("CPU CORE\n0 x\n")
        with self.assertRaisesRegex(ValueError, "lscpu -e line 3: 1 fields for the 2 columns"):
            topology.Topology.parse("CPU CORE\n0 0\n1\n")
        with self.assertRaisesRegex(ValueError, "no output"):
            topology.Topology.parse("")

    def test_results_json_round_trip(self):
        machine = topology.Topology.parse(HYPERTHREADED, "Thread(s) per core: 2\n")
        again = topology.Topology.from_dict(machine.as_dict())
        self.assertEqual(machine, again)
        self.assertIsNone(topology.Topology.from_dict(None))


class ReadTest(tf.test.TestCase):

    def test_this_machine(self):
        machine = topology.read()
        allowed = topology.allowed_cpus()
        if machine.known:
            self.assertIn("CORE", machine.lscpu_e)
            self.assertTrue(set(allowed) <= set(machine.places))
        else:
            self.assertTrue(machine.note)
        self.assertCountEqual(allowed, machine.order(allowed))

    def test_a_failing_lscpu_leaves_the_topology_unknown_with_the_reason(self):
        def failing(args):
            raise OSError("lscpu -e exited with 1: no /sys")

        machine = topology.read(failing)
        self.assertFalse(machine.known)
        self.assertEqual("lscpu -e exited with 1: no /sys", machine.note)
        self.assertEqual([0, 1, 2], machine.order([2, 0, 1]))
        self.assertIn("topology unknown (lscpu -e exited with 1: no /sys)", machine.describe([0, 1]))
        self.assertEqual(HYPERTHREADED, topology.read(lambda args: HYPERTHREADED if args else "").lscpu_e)


if __name__ == "__main__":
    tf.test.main()
