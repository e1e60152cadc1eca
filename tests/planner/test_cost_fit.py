"""Tests of the cost model's fits (`planner.cost_fit`): the constants that made the points come back."""

import tensorflow as tf

from planner import cost_fit, cost_model


class CoreCostsFitTest(tf.test.TestCase):

    CORES = cost_model.CoreCosts(serial_fraction=0.25, exchange_spread=0.5)

    def test_fits_recover_the_shares_that_made_the_points(self):
        speedups = [(threads, 1.0 / self.CORES.compute_share(threads)) for threads in (2, 4, 16)]
        self.assertAlmostEqual(0.25, cost_fit.fit_serial_fraction(speedups))
        ratios = [(threads, self.CORES.exchange_share(threads)) for threads in (2, 8)]
        self.assertAlmostEqual(0.5, cost_fit.fit_exchange_spread(ratios))
        # One process on 4 cores at 2.36x one (issue 33's figure): about a quarter serial.
        self.assertAlmostEqual(0.2316, cost_fit.fit_serial_fraction([(4, 2.36)]), places=3)
        with self.assertRaisesRegex(ValueError, "needs a speed-up at more than one thread"):
            cost_fit.fit_serial_fraction([(1, 1.0)])
        with self.assertRaisesRegex(ValueError, "needs a ratio at more than one core per process"):
            cost_fit.fit_exchange_spread([])
        with self.assertRaisesRegex(ValueError, "a speed-up must be > 0, got 0"):
            cost_fit.fit_serial_fraction([(4, 0)])


class CalibrateTest(tf.test.TestCase):

    def test_recovers_the_costs_that_made_the_steps(self):
        truth = cost_model.StepCosts(overhead_s=0.002, cpu_s_per_byte=1e-9, compute_factor=0.2)
        handled, compute = [1e6, 5e6, 1e6, 5e6], [0.02, 0.02, 0.2, 0.2]
        beyond = [truth.overhead_s + truth.cpu_s_per_byte * b + truth.compute_factor * c
                  for b, c in zip(handled, compute)]
        self.assertAllClose(truth, cost_fit.calibrate(handled, compute, beyond))

    def test_a_given_cost_per_byte_is_kept(self):
        handled, compute = [2e6, 3e6], [0.02, 0.2]
        beyond = [0.001 + 2e-9 * b + 0.1 * c for b, c in zip(handled, compute)]
        costs = cost_fit.calibrate(handled, compute, beyond, cpu_s_per_byte=2e-9)
        self.assertAllClose([0.001, 2e-9, 0.1], list(costs))

    def test_one_compute_fits_no_compute_factor(self):
        costs = cost_fit.calibrate([1e6, 3e6, 5e6], [0.02] * 3, [0.003, 0.005, 0.007])
        self.assertAllClose([0.002, 1e-9, 0.0], list(costs))

    def test_no_cost_is_negative(self):
        # More bytes took less time: the best fit with every cost >= 0 has no cost per byte.
        costs = cost_fit.calibrate([1e6, 5e6], [0.02, 0.02], [0.006, 0.004])
        self.assertAllClose([0.005, 0.0, 0.0], list(costs))

    def test_bad_configurations_are_named(self):
        with self.assertRaisesRegex(ValueError, "different bytes"):
            cost_fit.calibrate([1e6, 1e6], [0.02, 0.2], [0.003, 0.004])
        with self.assertRaisesRegex(ValueError, "got 1, 1 and 1"):
            cost_fit.calibrate([1e6], [0.02], [0.003])
        with self.assertRaisesRegex(ValueError, "got 2, 1 and 2"):
            cost_fit.calibrate([1e6, 2e6], [0.02], [0.003, 0.004])


if __name__ == "__main__":
    tf.test.main()
