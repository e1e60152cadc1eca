"""Tests of dataprep.vocab: exact counting in bounded memory."""

import collections
import os

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from dataprep import vocab


def _keys(values):
    return np.array(values, dtype=vocab.key_dtype(max([0] + [len(v) for v in values])))


def _values(seed, count):
    """Zipf-distributed short values, some long ones and some empty ones."""
    rng = np.random.default_rng(seed)
    values = [b"%x" % v for v in rng.zipf(1.3, count)]
    values += [b"a-longer-value-%d" % v for v in rng.integers(0, 40, count // 20)]
    values += [b""] * 5
    rng.shuffle(values)
    return values


class VocabTest(tf.test.TestCase, parameterized.TestCase):

    def test_keys_sort_like_their_bytes(self):
        values = [b"b", b"a", b"", b"ab", b"a\x01", b"zzzzzzzz", b"\xff"]
        keys = _keys(values)
        self.assertEqual(keys.dtype.itemsize, vocab.KEY_ALIGN)
        self.assertEqual(keys[np.argsort(vocab.sortable(keys))].tolist(), sorted(values))
        wide = vocab.widen(keys, 16)
        self.assertEqual(wide[np.argsort(vocab.sortable(wide))].tolist(), sorted(values))

    @parameterized.named_parameters(("in_memory", 10**9, 10**9), ("spilled", 4000, 3000),
                                    ("tiny_budget", 200, 100))
    def test_counter_and_merge_equal_a_python_counter(self, budget_bytes, merge_budget_bytes):
        values = _values(0, 20000)
        counter = vocab.FieldCounter(budget_bytes, os.path.join(self.get_temp_dir(), "runs-%d" % budget_bytes))
        for start in range(0, len(values), 700):
            counter.add_keys(_keys(values[start:start + 700]))
            self.assertLessEqual(counter.held_bytes, max(budget_bytes, 700 * 24))
        if budget_bytes < 10**9:
            self.assertGreater(len(counter.runs), 3)
        counter.spill()
        keys, counts = vocab.merge_runs([run.load() for run in counter.runs], 3, merge_budget_bytes)
        expected = {value: count for value, count in collections.Counter(values).items() if count >= 3}
        self.assertEqual(dict(zip(keys.tolist(), counts.tolist())), expected)
        self.assertEqual(vocab.rank_kept(keys, counts).tolist(),
                         sorted(expected, key=lambda value: (-expected[value], value)))

    def test_merge_of_runs_with_different_key_widths(self):
        short = vocab.reduce_counts(_keys([b"a", b"b", b"a"]))
        long = vocab.reduce_counts(_keys([b"a", b"a-long-value-1", b"b", b"a-long-value-1"]))
        keys, counts = vocab.merge_runs([short, long], 2, 10)
        self.assertEqual(dict(zip(keys.tolist(), counts.tolist())), {b"a": 3, b"b": 2, b"a-long-value-1": 2})


if __name__ == "__main__":
    tf.test.main()
