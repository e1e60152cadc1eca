"""Fits of the cost model's machine constants to measured steps (least squares, every constant >= 0).

`calibrate` fits a strategy's `cost_model.StepCosts` to distributed steps;
`fit_serial_fraction` and `fit_exchange_spread` fit `cost_model.CoreCosts`
to one process's speed-ups on several cores and to the exchange's cost at
several cores per rank. `planner.benchmark_fit` feeds them benchmark results.
This module imports no TensorFlow.
"""

import itertools
from typing import Optional, Sequence, Tuple

import numpy as np

from planner.cost_model import StepCosts


def fit_serial_fraction(points: Sequence[Tuple[int, float]]) -> float:
    """The serial share of a step's compute (Amdahl's law) that fits measured speed-ups best.

    Args:
      points: `(threads, speed-up)`: one process's examples/sec on that many
        cores over its examples/sec on one (threads > 1).

    Returns:
      The least-squares `serial_fraction` of 1 / speed-up = s + (1 - s) / T, in [0, 1].

    Raises:
      ValueError: no point with more than one thread, or a speed-up <= 0.
    """
    x, y = [], []
    for threads, speedup in points:
        if speedup <= 0:
            raise ValueError("a speed-up must be > 0, got %r at %r threads" % (speedup, threads))
        if threads > 1:
            x.append(1.0 - 1.0 / threads)
            y.append(1.0 / speedup - 1.0 / threads)
    if not x:
        raise ValueError("fit_serial_fraction needs a speed-up at more than one thread, got %r" % (list(points),))
    xs, ys = np.asarray(x), np.asarray(y)
    return float(np.clip(np.dot(xs, ys) / np.dot(xs, xs), 0.0, 1.0))


def fit_exchange_spread(points: Sequence[Tuple[int, float]]) -> float:
    """The share of the exchange's cost that spreads over a process's cores, fitted to measured ratios.

    Args:
      points: `(cores per process, ratio)`: what a distributed step took
        beyond its compute at that many cores per process, over the same at one.

    Returns:
      The least-squares `exchange_spread` of ratio = 1 - p + p / T, in [0, 1].

    Raises:
      ValueError: no point with more than one core per process.
    """
    x, y = [], []
    for threads, ratio in points:
        if threads > 1:
            x.append(1.0 - 1.0 / threads)
            y.append(1.0 - ratio)
    if not x:
        raise ValueError("fit_exchange_spread needs a ratio at more than one core per process, got %r"
                         % (list(points),))
    xs, ys = np.asarray(x), np.asarray(y)
    return float(np.clip(np.dot(xs, ys) / np.dot(xs, xs), 0.0, 1.0))


# The positions of the costs in `StepCosts`, the columns of `calibrate`'s least squares.
_OVERHEAD, _PER_BYTE, _FACTOR = range(len(StepCosts._fields))


def calibrate(handled_bytes: Sequence[float], compute_s: Sequence[float], beyond_s: Sequence[float],
              cpu_s_per_byte: Optional[float] = None) -> StepCosts:
    """The `StepCosts` that fit measured distributed steps best (least squares, every cost >= 0).

    Args:
      handled_bytes: per measured configuration, the bytes a process handles per step (`traffic`).
      compute_s: per configuration, the compute of its step (its single process's step).
      beyond_s: per configuration, the seconds its step took beyond compute and the link.
      cpu_s_per_byte: the cost per byte, when known (e.g. the same transport's): then
        only the overhead and the compute factor are fitted.

    A cost whose configurations do not vary (one byte count, or one
    compute) is not fitted: it is 0 (`compute_factor`), or the given
    `cpu_s_per_byte`, or an error (bytes).

    Raises:
      ValueError: sequences of different lengths, fewer than two
        configurations, or all of them with the same bytes and no
        `cpu_s_per_byte` given.
    """
    count = len(handled_bytes)
    if not count == len(compute_s) == len(beyond_s) or count < 2:
        raise ValueError("calibrate needs >= 2 configurations of (bytes, compute, seconds) of equal length, "
                         "got %d, %d and %d" % (count, len(compute_s), len(beyond_s)))
    handled = np.asarray(handled_bytes, dtype=np.float64)
    compute = np.asarray(compute_s, dtype=np.float64)
    target = np.asarray(beyond_s, dtype=np.float64)
    if cpu_s_per_byte is not None:
        target = target - cpu_s_per_byte * handled
    elif np.ptp(handled) == 0:
        raise ValueError("calibrate needs configurations with different bytes, got %r (or give cpu_s_per_byte)"
                         % (list(handled_bytes),))
    # The columns of the costs the configurations can tell apart.
    columns = {_OVERHEAD: np.ones(count)}
    if cpu_s_per_byte is None:
        columns[_PER_BYTE] = handled
    if np.ptp(compute) > 0:
        columns[_FACTOR] = compute
    best = None
    every_subset = itertools.chain.from_iterable(
        itertools.combinations(sorted(columns), size) for size in range(len(columns) + 1))
    for keep in every_subset:
        solution = np.zeros(len(StepCosts._fields))
        if keep:
            matrix = np.stack([columns[c] for c in keep], axis=1)
            solution[list(keep)] = np.linalg.lstsq(matrix, target, rcond=None)[0]
        if (solution < 0).any():
            continue
        residual = float(np.sum((target - sum(solution[c] * columns[c] for c in columns)) ** 2))
        if best is None or residual < best[0]:
            best = (residual, solution)
    if best is None:
        raise ValueError("no fit with every cost >= 0 over %d measured steps" % len(target))
    overhead, per_byte, factor = best[1]
    return StepCosts(float(overhead), float(per_byte) if cpu_s_per_byte is None else cpu_s_per_byte, float(factor))
