"""Tests of the cost model's arithmetic (`planner.cost_model`)."""

import dataclasses

import tensorflow as tf
from absl.testing import parameterized

from planner import cost_model

# A small step: 10 ids of which 4 distinct, k = 3 (row bytes (3 + 1) x 4 = 16,
# with two int64 indices 32), 100 dense parameters (400 bytes), tables of 50 rows (800 bytes).
COMPUTE_S = 0.01
BATCH = 5


def _profile(costs=cost_model.StepCosts(cpu_s_per_byte=1e-6), **overrides):
    """A profile whose every strategy has Horovod's `costs`, unless `step_costs` is given."""
    values = dict(compute_s=COMPUTE_S, batch_size=BATCH, ids_per_step=10, distinct_ids_per_step=4.0,
                  embedding_size=3, feature_size=50, dense_params=100, step_costs={cost_model.HOROVOD: costs},
                  dedup=True)
    values.update(overrides)
    return cost_model.StepProfile(**values)


# 1 Gbit/s = 125,000,000 bytes/s; no latency unless a test sets it.
def _cluster(hosts=2, cores=1, gbps=1.0, latency_s=0.0):
    return cost_model.Cluster(hosts=hosts, cores_per_host=cores, link_gbps=gbps, latency_s=latency_s)


class StepProfileTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(("dedup", True, 4 * 32.0), ("plain", False, 10 * 32.0))
    def test_sparse_bytes_count_rows_values_and_indices(self, dedup, expected):
        self.assertAlmostEqual(expected, _profile(dedup=dedup).sparse_bytes)

    def test_dense_and_table_bytes(self):
        profile = _profile()
        self.assertEqual(400, profile.dense_bytes)
        self.assertEqual(50 * 16, profile.table_bytes)

    def test_bad_values_are_named(self):
        with self.assertRaisesRegex(ValueError, "distinct_ids_per_step must be in .* got 11"):
            _profile(distinct_ids_per_step=11.0)
        with self.assertRaisesRegex(ValueError, "compute_s must be > 0, got 0"):
            _profile(compute_s=0)
        with self.assertRaisesRegex(ValueError, "link_gbps must be > 0, got 0"):
            _cluster(gbps=0)
        with self.assertRaisesRegex(ValueError, "no costs for strategy 'mirrored'; strategies with costs: ps, "):
            _profile(step_costs={"mirrored": cost_model.StepCosts()})
        with self.assertRaisesRegex(ValueError, "step_costs\\['ps'\\]: compute_factor must be >= 0, got -0.1"):
            _profile(step_costs={cost_model.PS: cost_model.StepCosts(compute_factor=-0.1)})


class TrafficTest(tf.test.TestCase):

    def test_horovod_two_processes(self):
        # Allgather: 1 other process's rows (128 bytes); allreduce: 2 x 1/2 x 400 = 400 bytes.
        link, handled, rounds = cost_model.traffic(cost_model.HOROVOD, _profile(), _cluster())
        self.assertAlmostEqual(128 + 400, link)
        self.assertAlmostEqual(2 * (128 + 400), handled)
        self.assertEqual(3, rounds)

    def test_horovod_grows_with_processes(self):
        # 2 hosts x 2 cores: 3 other processes' rows, allreduce 2 x 3/4 x 400 = 600.
        link, _, rounds = cost_model.traffic(cost_model.HOROVOD, _profile(), _cluster(cores=2))
        self.assertAlmostEqual(3 * 128 + 600, link)
        self.assertEqual(9, rounds)

    def test_horovod_dense_reduces_the_tables(self):
        link, handled, _ = cost_model.traffic(cost_model.HOROVOD_DENSE, _profile(), _cluster())
        self.assertAlmostEqual(800 + 400, link)
        self.assertAlmostEqual(2 * 1200, handled)

    def test_ps_sends_half_of_a_pull_and_push_to_the_other_host(self):
        # Per worker: 2 x (128 + 400) = 1056 bytes; half goes to the other host's ps.
        link, handled, rounds = cost_model.traffic(cost_model.PS, _profile(), _cluster())
        self.assertAlmostEqual(528, link)
        self.assertAlmostEqual(2 * 1056, handled)
        self.assertEqual(4, rounds)

    def test_hybrid_two_processes(self):
        # 4 distinct ids: 4 x (4 id bytes + 2 x 16 row bytes) = 144 bytes, half of them to the other process;
        # the other process's exchange with this one is as large; allreduce 2 x 1/2 x 400 = 400 bytes.
        link, handled, rounds = cost_model.traffic(cost_model.HYBRID, _profile(), _cluster())
        self.assertAlmostEqual(144 / 2 + 400, link)
        self.assertAlmostEqual(2 * (144 / 2 + 400), handled)
        self.assertEqual(4 + 2, rounds)

    def test_hybrid_bytes_per_process_do_not_grow_with_processes(self):
        profile = _profile(dense_params=0)
        handled = [cost_model.traffic(cost_model.HYBRID, profile, _cluster(hosts=hosts))[1]
                   for hosts in (2, 4, 8, 64)]
        gathered = [cost_model.traffic(cost_model.HOROVOD, profile, _cluster(hosts=hosts))[1]
                    for hosts in (2, 4, 8, 64)]
        self.assertLess(max(handled), 2 * 144 + 1e-9)
        self.assertLess(max(handled) / min(handled), 2.0)
        self.assertGreater(gathered[-1] / gathered[0], 60)

    def test_one_host_has_no_link_traffic(self):
        for strategy in (cost_model.HOROVOD, cost_model.HOROVOD_DENSE, cost_model.PS, cost_model.HYBRID):
            link, _, _ = cost_model.traffic(strategy, _profile(), _cluster(hosts=1, cores=2))
            self.assertEqual(0.0, link, strategy)

    def test_unknown_strategy_is_named(self):
        with self.assertRaisesRegex(ValueError, "got 'mirrored'"):
            cost_model.traffic("mirrored", _profile(), _cluster())


class PredictTest(tf.test.TestCase):

    def test_single_is_batch_over_compute(self):
        prediction = cost_model.predict(cost_model.SINGLE, _profile(), _cluster(hosts=4))
        self.assertAlmostEqual(BATCH / COMPUTE_S, prediction.examples_per_sec)
        self.assertAlmostEqual(1.0, prediction.efficiency)

    def test_horovod_step_adds_cpu_link_and_latency(self):
        prediction = cost_model.predict(cost_model.HOROVOD, _profile(), _cluster(latency_s=1e-4))
        cpu = 2 * 528 * 1e-6
        link = 528 / 125e6
        step = COMPUTE_S + cpu + link + 3 * 1e-4
        self.assertAlmostEqual(cpu, prediction.cpu_comm_s)
        self.assertAlmostEqual(link, prediction.link_s)
        self.assertAlmostEqual(step, prediction.step_s)
        self.assertAlmostEqual(2 * BATCH / step, prediction.examples_per_sec)
        self.assertAlmostEqual(COMPUTE_S / step, prediction.efficiency)

    def test_slow_link_makes_the_link_the_bottleneck(self):
        profile = _profile(cost_model.StepCosts(), dedup=False)
        prediction = cost_model.predict(cost_model.HOROVOD_DENSE, profile, _cluster(gbps=1e-5))
        self.assertEqual("link bandwidth", prediction.bottleneck())

    def test_choose_prefers_sparse_rows_over_dense_tables(self):
        # Tables far larger than a batch's rows: moving whole tables loses.
        profile = _profile(cost_model.StepCosts(cpu_s_per_byte=1e-9), feature_size=10 ** 6)
        ranked = cost_model.predict_all(profile, _cluster(gbps=10.0))
        self.assertEqual(cost_model.HOROVOD_DENSE, ranked[-1].strategy)
        strategy, reason = cost_model.choose(profile, _cluster(gbps=10.0))
        self.assertEqual(ranked[0].strategy, strategy)
        self.assertIn(strategy, reason)

    def test_choose_single_when_moving_bytes_costs_more_than_a_step(self):
        strategy, reason = cost_model.choose(_profile(cost_model.StepCosts(cpu_s_per_byte=1e-3)), _cluster())
        self.assertEqual(cost_model.SINGLE, strategy)
        self.assertIn("one process", reason)

    def test_overhead_is_added_to_distributed_steps_only(self):
        profile = _profile(cost_model.StepCosts(overhead_s=0.002))
        self.assertAlmostEqual(0.002, cost_model.predict(cost_model.HOROVOD, profile, _cluster()).cpu_comm_s)
        self.assertAlmostEqual(0.0, cost_model.predict(cost_model.SINGLE, profile, _cluster()).cpu_comm_s)

    def test_compute_factor_grows_with_the_compute(self):
        costs = cost_model.StepCosts(overhead_s=0.002, compute_factor=0.25)
        for compute_s in (0.01, 0.08):
            prediction = cost_model.predict(cost_model.HYBRID, _profile(costs, compute_s=compute_s), _cluster())
            self.assertAlmostEqual(0.002 + 0.25 * compute_s, prediction.cpu_comm_s)
            self.assertAlmostEqual(compute_s, prediction.compute_s)

    def test_ps_has_its_own_costs_where_given(self):
        horovod = cost_model.StepCosts(overhead_s=0.002)
        ps = cost_model.StepCosts(overhead_s=0.005, cpu_s_per_byte=1e-9, compute_factor=0.5)
        profile = _profile(step_costs={cost_model.HOROVOD: horovod, cost_model.PS: ps})
        self.assertEqual(ps, profile.costs(cost_model.PS))
        self.assertEqual(horovod, profile.costs(cost_model.HOROVOD))
        self.assertEqual(horovod, profile.costs(cost_model.HYBRID))
        prediction = cost_model.predict(cost_model.PS, profile, _cluster())
        self.assertAlmostEqual(0.005 + 2 * 1056 * 1e-9 + 0.5 * COMPUTE_S, prediction.cpu_comm_s)
        self.assertEqual(horovod, _profile(horovod).costs(cost_model.PS))
        self.assertEqual(cost_model.StepCosts(), _profile(step_costs={}).costs(cost_model.PS))


class TransportTest(tf.test.TestCase):
    """Horovod's ranks over Gloo or MPI: a strategy's own costs per transport, where fitted."""

    GLOO_COSTS = cost_model.StepCosts(overhead_s=0.02)
    MPI_COSTS = cost_model.StepCosts(overhead_s=0.004, compute_factor=0.1)

    def _profile(self):
        return _profile(step_costs={cost_model.HOROVOD: cost_model.StepCosts(overhead_s=0.01),
                                    cost_model.HYBRID: self.GLOO_COSTS,
                                    cost_model.costs_key(cost_model.HYBRID, cost_model.MPI): self.MPI_COSTS})

    def test_costs_by_transport_fall_back_to_the_strategys_over_gloo(self):
        profile = self._profile()
        self.assertEqual("hybrid@mpi", cost_model.costs_key(cost_model.HYBRID, cost_model.MPI))
        self.assertEqual("hybrid", cost_model.costs_key(cost_model.HYBRID, cost_model.GLOO))
        self.assertEqual(self.MPI_COSTS, profile.costs(cost_model.HYBRID, cost_model.MPI))
        self.assertEqual(self.GLOO_COSTS, profile.costs(cost_model.HYBRID))
        # Horovod has no costs over MPI of its own: its Gloo costs.
        self.assertEqual(cost_model.StepCosts(overhead_s=0.01), profile.costs(cost_model.HOROVOD, cost_model.MPI))

    def test_predictions_take_the_clusters_transport(self):
        profile = self._profile()
        gloo = cost_model.predict(cost_model.HYBRID, profile, _cluster())
        mpi = cost_model.predict(cost_model.HYBRID, profile, dataclasses.replace(_cluster(), transport=cost_model.MPI))
        self.assertAlmostEqual(0.02, gloo.cpu_comm_s)
        self.assertAlmostEqual(0.004 + 0.1 * COMPUTE_S, mpi.cpu_comm_s)
        self.assertGreater(mpi.examples_per_sec, gloo.examples_per_sec)
        strategy, reason = cost_model.choose(profile, dataclasses.replace(_cluster(), transport=cost_model.MPI))
        self.assertEqual(cost_model.HYBRID, strategy)
        self.assertIn("hybrid over MPI:", reason)

    def test_bad_transports_and_keys_are_named(self):
        with self.assertRaisesRegex(ValueError, "transport must be one of gloo, mpi, got 'nccl'"):
            cost_model.Cluster(hosts=2, cores_per_host=1, link_gbps=1.0, transport="nccl")
        # Parameter servers talk gRPC whatever the transport: no costs over MPI.
        with self.assertRaisesRegex(ValueError, "no costs for strategy 'ps@mpi'; strategies with costs: .*hybrid@mpi"):
            _profile(step_costs={"ps@mpi": cost_model.StepCosts()})


class CoresAndRanksTest(tf.test.TestCase):
    """Processes per host, each on its share of the host's cores (`CoreCosts`)."""

    CORES = cost_model.CoreCosts(serial_fraction=0.25, exchange_spread=0.5)

    def test_a_cluster_counts_processes_per_host_and_their_cores(self):
        cluster = cost_model.Cluster(hosts=2, cores_per_host=16, link_gbps=1.0, ranks_per_host=4)
        self.assertEqual((4, 4, 8), (cluster.ranks, cluster.threads, cluster.processes))
        self.assertEqual((16, 1, 32), (_cluster(cores=16).ranks, _cluster(cores=16).threads,
                                       _cluster(cores=16).processes))
        with self.assertRaisesRegex(ValueError, "ranks_per_host must divide cores_per_host 16 .* got 3"):
            cost_model.Cluster(hosts=1, cores_per_host=16, link_gbps=1.0, ranks_per_host=3)
        self.assertEqual([1, 2, 3, 4, 6, 12], cost_model.divisors(12))

    def test_compute_on_several_cores_follows_amdahl(self):
        profile = _profile(core_costs=self.CORES)
        # 1/4 serial: 4 threads take 0.25 + 0.75 / 4 = 0.4375 of one thread's time.
        self.assertAlmostEqual(COMPUTE_S * 0.4375, profile.compute_at(4))
        self.assertAlmostEqual(COMPUTE_S, profile.compute_at(1))
        self.assertAlmostEqual(COMPUTE_S * 4, _profile().compute_at(4) * 4)
        with self.assertRaisesRegex(ValueError, "core_costs: serial_fraction must be in \\[0, 1\\], got 1.5"):
            _profile(core_costs=cost_model.CoreCosts(serial_fraction=1.5))

    def test_a_rank_of_several_cores_spreads_part_of_its_exchange(self):
        costs = cost_model.StepCosts(overhead_s=0.004, cpu_s_per_byte=1e-6, compute_factor=0.1)
        profile = _profile(costs, core_costs=self.CORES)
        cluster = cost_model.Cluster(hosts=2, cores_per_host=4, link_gbps=1.0, latency_s=0.0, ranks_per_host=1)
        prediction = cost_model.predict(cost_model.HOROVOD, profile, cluster)
        compute = COMPUTE_S * 0.4375
        # Half the fixed and per-byte cost spreads over 4 cores: x (0.5 + 0.5 / 4).
        self.assertAlmostEqual(compute, prediction.compute_s)
        self.assertAlmostEqual((0.004 + 2 * 528 * 1e-6) * 0.625 + 0.1 * compute, prediction.cpu_comm_s)
        self.assertEqual((2, 1, 4), (prediction.processes, prediction.ranks_per_host, prediction.threads))
        self.assertAlmostEqual(compute / prediction.step_s, prediction.efficiency)
        single = cost_model.predict(cost_model.SINGLE, profile, cluster)
        self.assertAlmostEqual(BATCH / compute, single.examples_per_sec)

    def test_ranks_of_a_host_share_its_link(self):
        profile = _profile()
        one, four = (cost_model.Cluster(hosts=2, cores_per_host=4, link_gbps=1.0, ranks_per_host=ranks)
                     for ranks in (1, 4))
        # hybrid: 4 processes per host, each 4/8 of whose rows go to the other host.
        link, _, _ = cost_model.traffic(cost_model.HYBRID, profile, four)
        reduced = 2.0 * 7 / 8 * 400
        self.assertAlmostEqual(4 * (4 / 8 * profile.hybrid_bytes + reduced), link)
        ps_one, _, _ = cost_model.traffic(cost_model.PS, profile, one)
        ps_four, _, _ = cost_model.traffic(cost_model.PS, profile, four)
        self.assertAlmostEqual(4 * ps_one, ps_four)


class RelativeErrorTest(tf.test.TestCase):

    def test_relative_error(self):
        self.assertAlmostEqual(0.1, cost_model.relative_error(110.0, 100.0))
        with self.assertRaisesRegex(ValueError, "measured must be > 0, got 0"):
            cost_model.relative_error(1.0, 0.0)


if __name__ == "__main__":
    tf.test.main()
