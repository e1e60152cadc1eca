"""Tests of dataprep.raw_criteo: valid Criteo lines with the distinct values asked for."""

import os

import tensorflow as tf

from dataprep import criteo, raw_criteo
from input_pipeline import schema


class RawCriteoTest(tf.test.TestCase):

    def test_lines_parse_and_hold_the_distinct_values_asked_for(self):
        spec = raw_criteo.RawSpec(rows=3000, distinct=7000, seed=1)
        path = os.path.join(self.get_temp_dir(), "raw.tsv")
        size = raw_criteo.write(spec, path)
        with open(path) as f:
            lines = f.read().splitlines()
        self.assertLen(lines, 3000)
        self.assertEqual(size, os.path.getsize(path))
        records = [criteo.parse_line(line) for line in lines]
        unique = spec.unique_sizes()
        self.assertEqual(sum(unique), 7000)
        self.assertLen(unique, 3)
        first_unique = schema.NUM_CATEGORICAL_FIELDS - len(unique)
        for f, size_f in enumerate(unique):
            seen = {r.categorical[first_unique + f] for r in records} - {""}
            self.assertBetween(len(seen), size_f * 0.85, size_f)
        small = {r.categorical[1] for r in records} - {""}
        self.assertLessEqual(len(small), raw_criteo.SMALL_VOCAB_SIZES[1])
        positives = sum(r.label for r in records) / len(records)
        self.assertBetween(positives, 0.2, 0.3)
        with open(path, "rb") as f:
            self.assertEqual(b"".join(raw_criteo.blocks(spec)), f.read(), "the same spec gives the same text")


if __name__ == "__main__":
    tf.test.main()
