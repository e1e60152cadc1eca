"""Tests of strategies.cluster: TF_CONFIG parsing."""

import json

import tensorflow as tf
from absl.testing import parameterized

from strategies import cluster

CLUSTER = {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"], "ps": ["host0:2223", "host1:2223"]}
SAGEMAKER_CLUSTER = {"master": ["algo-1:2222"], "worker": ["algo-2:2222"], "ps": ["algo-1:2223", "algo-2:2223"]}


def tf_config(task_type, index=0, jobs=None):
    return json.dumps({"cluster": jobs or CLUSTER, "task": {"type": task_type, "index": index}})


class ParseTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("chief", "chief", 0, True, False, 0),
        ("worker_0", "worker", 0, False, False, 1),
        ("worker_1", "worker", 1, False, False, 2),
    )
    def test_training_tasks(self, task_type, index, is_chief, is_ps, worker_index):
        info = cluster.parse(tf_config(task_type, index))
        self.assertEqual(info.task_type, task_type)
        self.assertEqual(info.task_index, index)
        self.assertEqual(info.is_chief, is_chief)
        self.assertEqual(info.is_ps, is_ps)
        self.assertEqual(info.worker_index, worker_index)
        self.assertEqual(info.num_workers, 3)
        self.assertEqual(info.num_ps, 2)
        self.assertEqual(info.task_device, "/job:%s/task:%d" % (task_type, index))
        self.assertEqual(info.task_name, "%s_%d" % (task_type, index))

    def test_ps_task(self):
        info = cluster.parse(tf_config("ps", 1))
        self.assertTrue(info.is_ps)
        self.assertFalse(info.is_chief)
        self.assertEqual(info.ps_device(1), "/job:ps/task:1")
        with self.assertRaisesRegex(ValueError, "ps task 1 is not a training task"):
            _ = info.worker_index
        self.assertEqual({"chief_0": "host0:2222", "worker_0": "host1:2222", "worker_1": "host2:2222"},
                         info.training_tasks)
        self.assertEqual(["chief_0", "worker_0", "worker_1"], list(info.training_tasks))

    def test_sagemaker_master_is_the_chief(self):
        master = cluster.parse(tf_config("master", 0, SAGEMAKER_CLUSTER))
        self.assertTrue(master.is_chief)
        self.assertEqual(master.chief_job, "master")
        self.assertEqual(master.worker_index, 0)
        self.assertEqual(master.num_workers, 2)
        worker = cluster.parse(tf_config("worker", 0, SAGEMAKER_CLUSTER))
        self.assertFalse(worker.is_chief)
        self.assertEqual(worker.worker_index, 1)
        self.assertEqual({"master_0": "algo-1:2222", "worker_0": "algo-2:2222"}, worker.training_tasks)

    def test_cluster_spec_and_round_trip(self):
        info = cluster.parse(tf_config("worker", 1))
        spec = info.cluster_spec()
        self.assertEqual(spec.job_tasks("worker"), CLUSTER["worker"])
        self.assertEqual(spec.num_tasks("ps"), 2)
        self.assertEqual(cluster.parse(info.to_tf_config()), info)

    def test_from_environment(self):
        info = cluster.from_environment({cluster.TF_CONFIG_VARIABLE: tf_config("ps", 0)})
        self.assertTrue(info.is_ps)
        with self.assertRaisesRegex(ValueError, "TF_CONFIG is not set"):
            cluster.from_environment({})

    @parameterized.named_parameters(
        ("empty", "", "TF_CONFIG is not set"),
        ("not_json", "{cluster:", r"TF_CONFIG is not valid JSON .*'\{cluster:'"),
        ("not_object", "[1, 2]", r"must be a JSON object, got '\[1, 2\]'"),
        ("no_cluster", json.dumps({"task": {"type": "chief"}}), r'TF_CONFIG\["cluster"\] must be an object.*None'),
        ("unknown_job", tf_config("chief", 0, dict(CLUSTER, evaluator=["h:1"])), "has job 'evaluator'"),
        ("job_not_list", tf_config("chief", 0, dict(CLUSTER, ps="host0:2223")),
         r'\["ps"\] must be a non-empty list.*\'host0:2223\''),
        ("bad_port", tf_config("chief", 0, dict(CLUSTER, ps=["host0:22x"])), r"\[\"ps\"\]\[0\].*'host0:22x'"),
        ("no_port", tf_config("chief", 0, dict(CLUSTER, ps=["host0"])), r"\[\"ps\"\]\[0\].*'host0'"),
        ("port_too_large", tf_config("chief", 0, dict(CLUSTER, ps=["h:70000"])), "'h:70000'"),
        ("shared_address", tf_config("chief", 0, dict(CLUSTER, ps=["host0:2222"])),
         "chief task 0 and ps task 0 share the address 'host0:2222'"),
        ("no_chief", tf_config("worker", 0, {"worker": ["a:1"], "ps": ["b:1"]}),
         'exactly one of the jobs "chief" or "master"'),
        ("chief_and_master", tf_config("chief", 0, dict(CLUSTER, master=["host9:1"])),
         'exactly one of the jobs "chief" or "master"'),
        ("two_chiefs", tf_config("chief", 0, dict(CLUSTER, chief=["a:1", "b:1"])),
         r"\[\"chief\"\] must list exactly one address, got \['a:1', 'b:1'\]"),
        ("no_task", json.dumps({"cluster": CLUSTER}), r'TF_CONFIG\["task"\] must be an object.*None'),
        ("task_type_not_in_cluster", tf_config("evaluator"), r"\[\"type\"\] must be one of .* got 'evaluator'"),
        ("index_out_of_range", tf_config("worker", 2), r"must be an integer in \[0, 2\) for job 'worker', got 2"),
        ("index_not_int", tf_config("worker", "1"), r"for job 'worker', got '1'"),
    )
    def test_bad_tf_config(self, text, message):
        with self.assertRaisesRegex(ValueError, message):
            cluster.parse(text)


class LocalClusterTest(tf.test.TestCase):

    def test_layout(self):
        jobs = cluster.local_cluster(num_ps=2, num_workers=3, ports=[1, 2, 3, 4, 5])
        self.assertEqual(jobs, {"chief": ("localhost:1",), "worker": ("localhost:2", "localhost:3"),
                                "ps": ("localhost:4", "localhost:5")})
        info = cluster.ClusterInfo(jobs=jobs, task_type="worker", task_index=1)
        self.assertEqual(cluster.parse(info.to_tf_config()), info)

    def test_chief_only(self):
        jobs = cluster.local_cluster(num_ps=1, num_workers=1, ports=[7, 8])
        self.assertNotIn("worker", jobs)
        self.assertEqual(cluster.ClusterInfo(jobs=jobs, task_type="chief", task_index=0).num_workers, 1)

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "num_ps must be >= 1, got 0"):
            cluster.local_cluster(0, 2, [1, 2])
        with self.assertRaisesRegex(ValueError, "num_workers must be >= 1.*got 0"):
            cluster.local_cluster(1, 0, [1])
        with self.assertRaisesRegex(ValueError, "2 ports for 3 tasks"):
            cluster.local_cluster(1, 2, [1, 2])


if __name__ == "__main__":
    tf.test.main()
