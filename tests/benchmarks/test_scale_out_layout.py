"""Tests of the pinning arithmetic of the scale-out benchmarks: each host's, each process's cores, its threads."""

import tensorflow as tf

from benchmarks.scale_out import layout
from benchmarks.scale_out import variants as variants_lib
from benchmarks.scale_out.config import BenchmarkConfig
from strategies import strategy_names as names

SIXTEEN = list(range(16))


def _variant(strategy, cores_per_host, ranks_per_host, **fields):
    return variants_lib.Variant("v", strategy, "", **fields).at_layout(cores_per_host, ranks_per_host)


class CpuListTest(tf.test.TestCase):

    def test_runs_become_ranges_in_the_given_order(self):
        self.assertEqual("0-3", layout.cpu_list((0, 1, 2, 3)))
        self.assertEqual("0-1,8-9,5", layout.cpu_list((0, 1, 8, 9, 5)))
        self.assertEqual("0,4", layout.cpu_list((0, 4)))
        self.assertEqual("", layout.cpu_list(()))

    def test_split_needs_equal_blocks(self):
        self.assertEqual(((0, 1), (2, 3)), layout.split((0, 1, 2, 3), 2))
        with self.assertRaisesRegex(ValueError, "4 cores do not divide into 3 equal blocks"):
            layout.split((0, 1, 2, 3), 3)


class PlanTest(tf.test.TestCase):

    def test_hosts_of_four_cores_with_one_rank(self):
        plan = layout.plan(_variant(names.HYBRID, 4, 1, hosts=4), SIXTEEN)
        self.assertEqual(((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)), plan.hosts)
        self.assertEqual(["taskset", "--cpu-list", "8-11"], plan.pin(2, 0))
        self.assertEqual(["--intra_op_threads", "4", "--inter_op_threads", "4"], plan.thread_flags())

    def test_single_runs_on_the_cores_of_one_rank(self):
        plan = layout.plan(_variant(names.SINGLE, 8, 4), SIXTEEN)
        self.assertEqual(((0, 1, 2, 3, 4, 5, 6, 7),), plan.hosts)
        self.assertEqual((((0, 1),),), plan.processes)
        self.assertEqual(2, plan.threads)
        copies = layout.plan(_variant(names.SINGLE, 2, 1, copies=2), SIXTEEN)
        self.assertEqual(((0, 1), (2, 3)), copies.hosts)
        self.assertEqual(["taskset", "--cpu-list", "2-3"], copies.pin(1, 0))

    def test_one_host_of_every_core_in_ranks(self):
        variant = _variant(names.HYBRID, 16, 8, hosts=1)
        self.assertEqual((8, 2, "8x2"), (variant.processes, variant.cores_per_rank, variant.shape()))
        plan = layout.plan(variant, SIXTEEN)
        self.assertEqual((tuple(SIXTEEN),), plan.hosts)
        self.assertEqual(tuple((2 * i, 2 * i + 1) for i in range(8)), plan.processes[0])
        self.assertEqual("algo-1: 0-15 (processes on 0-1, 2-3, 4-5, 6-7, 8-9, 10-11, 12-13, 14-15)", plan.describe())

    def test_ps_hosts_and_horovodrun_hosts_are_not_pinned_within(self):
        ps = layout.plan(_variant(names.PS, 4, 1), SIXTEEN)
        self.assertEqual(((0, 1, 2, 3),), ps.processes[0])
        self.assertEqual(4, ps.threads)
        launched = layout.plan(_variant(names.HOROVOD, 4, 2, hosts=1, launcher=variants_lib.LAUNCH_GLOO), SIXTEEN)
        self.assertEqual(((),), launched.processes)
        self.assertEqual([], launched.pin(0, 0))
        self.assertEqual(2, launched.threads)

    def test_shared_cores_pin_the_hosts_only(self):
        plan = layout.plan(_variant(names.HYBRID, 1, 1, hosts=8), SIXTEEN, shared_cores=2)
        self.assertEqual(((0, 1),) * 8, plan.hosts)
        self.assertEqual([], plan.pin(3, 0))
        self.assertEqual([], plan.thread_flags())

    def test_too_few_cores_is_named(self):
        with self.assertRaisesRegex(ValueError, "4 host\\(s\\) x 4 core\\(s\\) need 16 vCPUs; this process may use 8 "
                                    "\\(0-7\\)"):
            layout.plan(_variant(names.HOROVOD, 4, 1, hosts=4), SIXTEEN[:8])


class VariantLayoutTest(tf.test.TestCase):

    def test_a_variant_takes_the_runs_layout_unless_it_has_its_own(self):
        own = variants_lib.Variant("v", names.HYBRID, "", cores_per_host=16, ranks_per_host=4, hosts=1)
        self.assertEqual((16, 4), (own.at_layout(2, 1).cores_per_host, own.at_layout(2, 1).ranks_per_host))
        left = variants_lib.Variant("v", names.HYBRID, "").at_layout(4, 2)
        self.assertEqual((4, 2, 4), (left.cores_per_host, left.ranks_per_host, left.processes))

    def test_layouts_that_cannot_be_are_named(self):
        with self.assertRaisesRegex(ValueError, "variant v: 4 cores per host do not divide among 3 ranks per host"):
            variants_lib.Variant("v", names.HYBRID, "").at_layout(4, 3)
        with self.assertRaisesRegex(ValueError, "variant v: ps runs one worker and one parameter server per host"):
            variants_lib.Variant("v", names.PS, "").at_layout(4, 2)
        with self.assertRaisesRegex(ValueError, "variant v: strategy 'tower' is not one of"):
            variants_lib.Variant("v", names.TOWER, "")
        with self.assertRaisesRegex(ValueError, "launcher 'gloo' starts every rank on one host, got hosts=2"):
            variants_lib.Variant("v", names.HYBRID, "", launcher=variants_lib.LAUNCH_GLOO)
        with self.assertRaisesRegex(ValueError, "--cores_per_host 4 does not divide among --ranks_per_host 3"):
            BenchmarkConfig(data_dir="d", rows=1, runs=1, steps=20, warmup_steps=0, link_gbps=0, variants=(),
                            results_dir="r", cores_per_host=4, ranks_per_host=3)

    def test_a_new_variant_is_one_declarative_entry(self):
        variant = variants_lib.Variant("hybrid+pipeline", names.HYBRID, "--pipeline_ids", ("--pipeline_ids",))
        config = BenchmarkConfig(data_dir="d", rows=1, runs=1, steps=20, warmup_steps=0, link_gbps=0,
                                 variants=(variant,), results_dir="r", cores_per_host=2, ranks_per_host=2)
        (resolved,) = config.variants
        self.assertEqual((2, 2, 4), (resolved.cores_per_host, resolved.ranks_per_host, resolved.processes))
        names_seen = [v.name for v in variants_lib.VARIANTS]
        self.assertEqual(len(names_seen), len(set(names_seen)))


if __name__ == "__main__":
    tf.test.main()
