"""Elastic sizes: the bounds, and host discovery in Horovod's format."""

import unittest

from jobs import elastic


class ElasticRangeTest(unittest.TestCase):

    def test_size(self):
        bounds = elastic.ElasticRange(1, 3)
        self.assertTrue(bounds.elastic)
        self.assertEqual([1, 2, 3, 3], [bounds.size(n) for n in (1, 2, 3, 7)])
        with self.assertRaisesRegex(elastic.BelowMinimumError, "0 training worker.*minimum 1"):
            bounds.size(0)
        self.assertFalse(elastic.ElasticRange(2, 2).elastic)

    def test_bad_bounds(self):
        for low, high in ((0, 2), (3, 2)):
            with self.assertRaisesRegex(ValueError, "--min_replicas %d and --max_replicas %d" % (low, high)):
                elastic.ElasticRange(low, high)


class DiscoveryTest(unittest.TestCase):

    def test_horovods_format(self):
        self.assertEqual(5, elastic.parse_discovery("host-a:2\nhost-b:3\n\n"))
        self.assertEqual(2, elastic.parse_discovery("host-a\nhost-b\n"))
        with self.assertRaisesRegex(ValueError, r"line 2: 'b:two' is not HOST or HOST:SLOTS"):
            elastic.parse_discovery("a:1\nb:two\n")

    def test_a_real_script(self):
        self.assertEqual(3, elastic.discover(["/bin/sh", "-c", "echo a:1; echo b:2"]))
        with self.assertRaisesRegex(ValueError, "exited with 2: no hosts"):
            elastic.discover(["/bin/sh", "-c", "echo no hosts >&2; exit 2"])


if __name__ == "__main__":
    unittest.main()
