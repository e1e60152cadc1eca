"""The distributed Criteo conversion as SageMaker Processing jobs: the stages, the local emulation, the SDK's requests.

The local jobs run on emulated hosts (network, PID, mount and UTS
namespaces: root needed) and skip with the reason otherwise; the dry run
needs the SageMaker Python SDK (the `sdk` extra) and skips without it.
"""

import dataclasses
import json
import os
import posixpath
import shutil
import signal
import subprocess

import psutil
import pytest
import tensorflow as tf

from dataprep import criteo, raw_criteo
from dataprep import criteo_processing as stages
from input_pipeline import files, formats, schema
from jobs import source as source_lib
from jobs.local import hosts
from jobs.sagemaker import local as sagemaker_local
from jobs.sagemaker import processing as sagemaker_processing
from jobs.sagemaker import processing_job
from tests import command_line, paths
from tests.input_pipeline import dataset_io

REPO_ROOT = paths.REPO_ROOT
RAW_FILES = 4
ROWS_PER_FILE = 150
DISTINCT = 150
INSTANCES = 2
OPTIONS = stages.StageOptions(val_fraction=0.2, min_count=2, shards=2, workers=1, memory_mb=64)
JOB_NAME = "criteo-test"
JOB_TIMEOUT_S = 120
BAD_LINE = "1\tnot-a-number\n"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


def write_raw(directory, bad_file=None):
    """RAW_FILES raw Criteo files; file `bad_file` (if any) gets a malformed line in its middle."""
    os.makedirs(directory)
    for index in range(RAW_FILES):
        path = os.path.join(directory, "day-%d.tsv" % index)
        raw_criteo.write(raw_criteo.RawSpec(ROWS_PER_FILE, DISTINCT, seed=index), path)
        if index == bad_file:
            with open(path) as f:
                lines = f.readlines()
            lines.insert(len(lines) // 2, BAD_LINE)
            with open(path, "w") as f:
                f.writelines(lines)
    return sorted(os.path.join(directory, name) for name in os.listdir(directory))


def raw_lines(paths):
    total = 0
    for path in paths:
        with open(path, "rb") as f:
            total += f.read().count(b"\n")
    return total


def sorted_libsvm_lines(root, metadata):
    lines = []
    for split in metadata.splits:
        for stem in metadata.splits[split].shards:
            with open(os.path.join(root, stem + ".libsvm")) as f:
                lines += ["%s %s" % (split, line) for line in f.read().splitlines()]
    return sorted(lines)


def sorted_rows(rows):
    labels, ids, values = rows
    return sorted(zip(labels.tolist(), map(tuple, ids.tolist()), map(tuple, values.tolist())))


def own_namespaces(pid):
    prefix = "%s-%d-" % (hosts.NAMESPACE_PREFIX, pid)
    etc = os.listdir(hosts.NETNS_ETC) if os.path.isdir(hosts.NETNS_ETC) else []
    return [name for name in hosts.list_namespaces() + etc if name.startswith(prefix)]


def remove_namespaces(names):
    for name in names:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
        shutil.rmtree(os.path.join(hosts.NETNS_ETC, name), ignore_errors=True)


class StagesTest(tf.test.TestCase):
    """The container side, run in this process with the contract's directories moved."""

    def host_dirs(self, root, host, hosts_of_job):
        dirs = stages.ContainerDirs(*(os.path.join(root, host, name) for name in ("config", "in", "out", "work")))
        sagemaker_local.write_json(os.path.join(dirs.config_dir, stages.RESOURCE_CONFIG),
                                   {"current_host": host, "hosts": hosts_of_job})
        return dirs

    def give(self, dirs, name, sources):
        for source in sources:
            target = os.path.join(dirs.input(name), os.path.basename(source))
            (shutil.copytree if os.path.isdir(source) else shutil.copy)(source, target)

    def run_stages(self, raw, root):
        names = ["algo-1", "algo-2"]
        counts = []
        for index, host in enumerate(names):
            dirs = self.host_dirs(os.path.join(root, "count"), host, names)
            os.makedirs(dirs.input(stages.RAW))
            self.give(dirs, stages.RAW, raw[index::2])
            stages.count(dirs, OPTIONS)
            counts.append(os.path.join(dirs.output(stages.COUNTS), host))
        parts = []
        for index, host in enumerate(names):
            dirs = self.host_dirs(os.path.join(root, "convert"), host, names)
            for name, sources in ((stages.RAW, raw[index::2]), (stages.COUNTS, counts)):
                os.makedirs(dirs.input(name))
                self.give(dirs, name, sources)
            stages.convert(dirs, OPTIONS)
            parts.append(dirs)
        return counts, parts

    def combine_dirs(self, root, counts, parts):
        dirs = self.host_dirs(os.path.join(root, "combine"), "algo-1", ["algo-1"])
        os.makedirs(dirs.input(stages.COUNTS))
        os.makedirs(dirs.input(stages.PARTS))
        self.give(dirs, stages.COUNTS, counts)
        self.give(dirs, stages.PARTS, [os.path.join(p.output(stages.PARTS), host)
                                       for p, host in zip(parts, ("algo-1", "algo-2"))])
        return dirs

    def test_every_instance_builds_the_vocabulary_of_one_process(self):
        root = self.create_tempdir().full_path
        raw = write_raw(os.path.join(root, "raw"))
        counts, parts = self.run_stages(raw, root)
        whole = criteo.convert(raw, os.path.join(root, "whole"),
                               criteo.ConversionOptions(val_fraction=OPTIONS.val_fraction, min_count=OPTIONS.min_count,
                                                        workers=1))
        part_metadata = [schema.DatasetMetadata.read(os.path.join(p.output(stages.PARTS), host))
                         for p, host in zip(parts, ("algo-1", "algo-2"))]
        for metadata in part_metadata:
            self.assertEqual(whole.vocabulary, metadata.vocabulary)
            self.assertEqual(whole.feature_size, metadata.feature_size)
        self.assertEqual(["train/part-algo-2-00000", "train/part-algo-2-00001"],
                         sorted(part_metadata[1].splits["train"].shards))
        combine_dirs = self.combine_dirs(root, counts, parts)
        combined = stages.combine(combine_dirs)
        self.assertEqual({name: info.rows for name, info in whole.splits.items()},
                         {name: info.rows for name, info in combined.splits.items()})
        self.assertIn("0 bad records skipped", combined.source)
        # The split folders' own metadata, which the convert instances' shards land beside in S3.
        data = combine_dirs.output(stages.DATA)
        for name, info in combined.splits.items():
            view = schema.DatasetMetadata.read(os.path.join(data, name))
            self.assertEqual((name, info.rows), (view.split, view.splits[name].rows))
            self.assertTrue(all(stem.startswith("part-algo-") for stem in view.splits[name].shards))

    def test_a_part_with_another_vocabulary_is_refused(self):
        root = self.create_tempdir().full_path
        counts, parts = self.run_stages(write_raw(os.path.join(root, "raw")), root)
        tampered = os.path.join(parts[1].output(stages.PARTS), "algo-2")
        metadata = schema.DatasetMetadata.read(tampered)
        values = metadata.vocabulary["C1"]["values"]
        first, second = sorted(values)[:2]
        values[first], values[second] = values[second], values[first]
        metadata.write(tampered)
        with self.assertRaisesRegex(ValueError, "algo-1 and algo-2 converted with different vocabularies"):
            stages.combine(self.combine_dirs(root, counts, parts))

    def test_outputs_are_never_overwritten(self):
        root = self.create_tempdir().full_path
        raw = write_raw(os.path.join(root, "raw"))
        dirs = self.host_dirs(root, "algo-1", ["algo-1"])
        os.makedirs(dirs.input(stages.RAW))
        self.give(dirs, stages.RAW, raw)
        stages.count(dirs, OPTIONS)
        with self.assertRaisesRegex(FileExistsError, "output .*counts/algo-1 already holds"):
            stages.count(dirs, OPTIONS)

    def test_stage_arguments_name_the_stage_and_its_options(self):
        self.assertEqual(["combine"], OPTIONS.arguments(stages.COMBINE))
        self.assertEqual(["count", "--val_fraction", "0.2", "--workers", "1", "--memory_mb", "64.0",
                          "--noskip_bad_records"], OPTIONS.arguments(stages.COUNT))
        self.assertIn("--min_count", OPTIONS.arguments(stages.CONVERT))
        with self.assertRaisesRegex(ValueError, "--shards must be >= 1, got 0"):
            stages.StageOptions(shards=0)


class SpecTest(tf.test.TestCase):

    def test_container_paths_outside_processing_are_refused(self):
        with self.assertRaisesRegex(ValueError, "input raw: its container path must begin with /opt/ml/processing/"):
            processing_job.ProcessingJobSpec(
                job_name="job", entrypoint=("python3",),
                inputs=(processing_job.Input("raw", "data", "/opt/ml/input/raw"),))

    def test_job_name_leaves_room_for_the_stage(self):
        with self.assertRaisesRegex(ValueError, "each job adds -<stage>"):
            sagemaker_processing.ConversionConfig(command="local", input=REPO_ROOT, output="out", job_name="x" * 60)

    def test_the_jobs_layer_imports_no_tensorflow(self):
        probe = "import sys, jobs.sagemaker.processing; print('tensorflow' in sys.modules)"
        result = command_line.run(["python", "-c", probe], self.get_temp_dir(), timeout=120)
        self.assertEqual(0, result.returncode, result.stderr)
        self.assertEqual("False", result.stdout.strip())

    def test_local_refuses_s3_and_an_existing_output(self):
        with self.assertRaisesRegex(ValueError, "--input must be a local path"):
            sagemaker_processing.ConversionConfig(command="local", input="s3://bucket/raw", output="out")
        output = self.create_tempdir()
        output.create_file("keep.txt")
        config = sagemaker_processing.ConversionConfig(command="local", input=REPO_ROOT, output=output.full_path)
        with self.assertRaisesRegex(FileExistsError, "--output_dir .* is not empty"):
            sagemaker_processing.run_conversion(config)
        self.assertEqual(["keep.txt"], os.listdir(output.full_path))


class EmulatedHostsTestCase(tf.test.TestCase):
    """Skips without root; checks that no namespace, mount or process outlives a test."""

    def setUp(self):
        super().setUp()
        reason = hosts.check_privileges()
        if reason:
            self.skipTest(reason)
        # Children this test process had before (an MPI singleton's orted, multiprocessing's resource
        # tracker, from other tests run in the same process) are not this test's.
        self.children_before = {child.pid for child in psutil.Process().children(recursive=True)}
        self.addCleanup(self.check_no_leftovers, os.getpid())

    def check_no_leftovers(self, pid, root=None):
        leftover = own_namespaces(pid)
        remove_namespaces(leftover)
        self.assertEqual([], leftover, "namespaces left behind")
        if root is not None:
            with open("/proc/self/mountinfo") as f:
                self.assertNotIn(root, f.read(), "mounts left behind")
        if pid == os.getpid():
            new_children = [child for child in psutil.Process().children(recursive=True)
                            if child.pid not in self.children_before]
            self.assertEqual([], new_children, "processes left behind")


CONTAINER_SCRIPT = """\
import json, os, socket, sys, input_pipeline
config = json.load(open("/opt/ml/config/resourceconfig.json"))
with open("/opt/ml/config/processingjobconfig.json") as f:
    job = json.load(f)
seen = {"hostname": socket.gethostname(), "hosts": config["hosts"], "job": job["ProcessingJobName"],
        "package": input_pipeline.__file__, "raw": sorted(os.listdir("/opt/ml/processing/input/raw")),
        "arguments": sys.argv[1:]}
name = config["current_host"] if sys.argv[1] == "own" else "same"
with open("/opt/ml/processing/output/seen/%s.json" % name, "w") as f:
    json.dump(seen, f)
"""


@pytest.mark.slow
class LocalProcessingJobTest(EmulatedHostsTestCase):
    """One Processing job on emulated hosts: what its containers see, and what is collected."""

    def spec(self, root, argument):
        code = os.path.join(root, "code", source_lib.SOURCE_ZIP)
        os.makedirs(os.path.dirname(code), exist_ok=True)
        source_lib.write_source_zip(code)
        raw = os.path.join(root, "raw")
        for name in ("a", "b", "c"):
            self.create_tempfile(os.path.join(raw, name), content=name)
        code_dir = "/opt/ml/processing/input/code"
        return processing_job.ProcessingJobSpec(
            job_name="contract", entrypoint=("python3", "-c", CONTAINER_SCRIPT), arguments=(argument,),
            environment={"PYTHONPATH": posixpath.join(code_dir, source_lib.SOURCE_ZIP)}, instance_count=2,
            inputs=(processing_job.Input("code", code, code_dir),
                    processing_job.Input("raw", raw, "/opt/ml/processing/input/raw", "ShardedByS3Key")),
            outputs=(processing_job.Output("seen", "/opt/ml/processing/output/seen",
                                                 os.path.join(root, "s3", "seen")),))

    def test_each_container_sees_its_host_its_share_and_the_shipped_code(self):
        root = self.create_tempdir().full_path
        collected = processing_job.run_job(self.spec(root, "own"), os.path.join(root, "job"), timeout_s=60)
        self.check_no_leftovers(os.getpid(), root)
        self.assertEqual({"seen": 2}, collected)
        for host, share in (("algo-1", ["a", "c"]), ("algo-2", ["b"])):
            with open(os.path.join(root, "s3", "seen", host + ".json")) as f:
                seen = json.load(f)
            self.assertEqual(host, seen["hostname"])
            self.assertEqual(["algo-1", "algo-2"], seen["hosts"])
            self.assertEqual("contract", seen["job"])
            self.assertEqual(share, seen["raw"])
            self.assertEqual(["own"], seen["arguments"])
            # The container imports the project from its code input, not from this checkout.
            self.assertEqual("/opt/ml/processing/input/code/%s/input_pipeline/__init__.py" % source_lib.SOURCE_ZIP,
                             seen["package"])

    def test_two_hosts_writing_one_file_fail_the_collection(self):
        root = self.create_tempdir().full_path
        with self.assertRaisesRegex(FileExistsError, "output seen: same.json of algo-2 would overwrite algo-1's"):
            processing_job.run_job(self.spec(root, "same"), os.path.join(root, "job"), timeout_s=60)
        self.assertFalse(os.path.exists(os.path.join(root, "s3", "seen", "same.json")))


@pytest.mark.slow
class LocalConversionTest(EmulatedHostsTestCase):
    """The three jobs on emulated hosts, as `python -m jobs.sagemaker.processing local` runs them."""

    def config(self, raw_dir, output, **options):
        return sagemaker_processing.ConversionConfig(
            command="local", input=raw_dir, output=output, instance_count=INSTANCES, job_name=JOB_NAME,
            timeout_s=JOB_TIMEOUT_S, options=dataclasses.replace(OPTIONS, **options))

    def test_two_instances_convert_as_one_process_does(self):
        root = self.create_tempdir().full_path
        raw = write_raw(os.path.join(root, "raw"), bad_file=3)
        output = os.path.join(root, "out")
        dataset = sagemaker_processing.run_conversion(self.config(os.path.join(root, "raw"), output,
                                                                  skip_bad_records=True))
        self.check_no_leftovers(os.getpid(), root)
        self.assertEqual(os.path.join(output, "data"), dataset)
        whole_dir = os.path.join(root, "whole")
        whole = criteo.convert(raw, whole_dir, criteo.ConversionOptions(val_fraction=OPTIONS.val_fraction,
                                                                        min_count=OPTIONS.min_count,
                                                                        skip_bad_records=True, workers=1))
        metadata = schema.DatasetMetadata.read(dataset)
        self.assertEqual(whole.vocabulary, metadata.vocabulary)
        self.assertEqual(whole.feature_size, metadata.feature_size)
        # Every raw line is a row or a bad record.
        rows = sum(info.rows for info in metadata.splits.values())
        self.assertEqual(RAW_FILES * ROWS_PER_FILE, rows)
        self.assertEqual(raw_lines(raw), rows + 1)
        self.assertIn("1 bad records skipped", metadata.source)
        # The same rows as one process writes, in shards of both instances.
        self.assertEqual(sorted_libsvm_lines(whole_dir, whole), sorted_libsvm_lines(dataset, metadata))
        self.assertLen(metadata.splits["train"].shards, INSTANCES * OPTIONS.shards)
        # What the trainer reads: the root's files with the metadata's row counts.
        for data_format in formats.names():
            train = files.resolve(dataset, data_format)
            self.assertLen(train, INSTANCES * OPTIONS.shards)
            self.assertEqual(files.count_rows(train, data_format), files.row_counts(train, data_format))
            self.assertEqual(metadata.splits["train"].rows, sum(files.row_counts(train, data_format).values()))
            self.assertLen(files.default_validation(dataset, data_format), INSTANCES * OPTIONS.shards)
        self.assertEqual(sorted_rows(dataset_io.read_split(whole_dir, whole, "train", "tfrecord")),
                         sorted_rows(dataset_io.read_split(dataset, metadata, "train", "tfrecord")))
        # Each instance got its own raw files, and every instance's counts.
        jobs = os.path.join(output, sagemaker_processing.JOBS)
        shares = [sorted(os.listdir(os.path.join(jobs, "convert", host, "processing", "input", "raw")))
                  for host in ("algo-1", "algo-2")]
        self.assertEqual([["day-0.tsv", "day-2.tsv"], ["day-1.tsv", "day-3.tsv"]], shares)
        self.assertEqual(["algo-1", "algo-2"],
                         sorted(os.listdir(os.path.join(jobs, "convert", "algo-2", "processing", "input", "counts"))))
        with open(os.path.join(jobs, "convert", "algo-2", "config", "resourceconfig.json")) as f:
            self.assertEqual({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}, json.load(f))
        with open(os.path.join(jobs, "convert", "algo-1", "config", "processingjobconfig.json")) as f:
            job_config = json.load(f)
        inputs = {item["InputName"]: item["S3Input"] for item in job_config["ProcessingInputs"]}
        self.assertEqual("ShardedByS3Key", inputs["raw"]["S3DataDistributionType"])
        self.assertEqual("FullyReplicated", inputs["counts"]["S3DataDistributionType"])
        self.assertEqual(["convert", "--min_count", "2"], job_config["AppSpecification"]["ContainerArguments"][:3])
        with open(os.path.join(jobs, "combine", "logs", "algo-1.log")) as f:
            self.assertIn("combined 2 part(s)", f.read())

    def test_a_failing_host_fails_the_job_naming_it(self):
        root = self.create_tempdir().full_path
        write_raw(os.path.join(root, "raw"), bad_file=1)
        output = os.path.join(root, "out")
        argv = command_line.python_module(
            "jobs.sagemaker.processing", "local", "--input", os.path.join(root, "raw"), "--output_dir", output,
            "--instance_count", str(INSTANCES), "--job_name", JOB_NAME, "--workers", "1",
            "--timeout_s", str(JOB_TIMEOUT_S))
        process = command_line.start(argv, root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(self.stop, process)
        out, err = process.communicate(timeout=JOB_TIMEOUT_S + 60)
        self.assertEqual(1, process.returncode, out + err)
        self.assertIn("%s failed: host algo-2 failed" % JOB_NAME, err)
        log = os.path.join(output, sagemaker_processing.JOBS, "count", "logs", "algo-2.log")
        self.assertIn(log, err)
        with open(log) as f:
            self.assertIn("day-1.tsv:%d: expected 40 tab-separated fields" % (ROWS_PER_FILE // 2 + 1), f.read())
        self.assertFalse(os.path.exists(os.path.join(output, sagemaker_processing.JOBS, "convert")))
        self.assertFalse(os.path.exists(os.path.join(output, "counts")), "a failed job's outputs were collected")
        self.check_no_leftovers(process.pid, root)

    def stop(self, process):
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        remove_namespaces(own_namespaces(process.pid))

    def test_a_sharded_input_needs_a_file_per_instance(self):
        root = self.create_tempdir().full_path
        raw = write_raw(os.path.join(root, "raw"))
        with self.assertRaisesRegex(ValueError, "input raw=.*day-0.tsv: a ShardedByS3Key channel has 1 file"):
            sagemaker_processing.run_conversion(self.config(raw[0], os.path.join(root, "out")))


class SubmitDryRunTest(tf.test.TestCase):
    """The three CreateProcessingJob requests, built by the real SDK and checked by botocore."""

    def setUp(self):
        super().setUp()
        try:
            import sagemaker  # noqa: F401
        except ImportError as e:
            self.skipTest("the SageMaker Python SDK (the 'sdk' extra) is not installed: %s" % e)

    def submit(self, *args):
        argv = command_line.python_module("jobs.sagemaker.processing", "submit", "--dry_run", "--role", ROLE, *args)
        return command_line.run(argv, self.get_temp_dir(), env=command_line.NO_AWS_CREDENTIALS, timeout=300)

    def test_requests_shard_the_raw_input_and_chain_the_jobs(self):
        args = ("--input", "s3://bucket/criteo/raw", "--output_path", "s3://bucket/criteo/out", "--instance_count",
                "4", "--job_name", JOB_NAME, "--min_count", "3", "--shards", "8", "--instance_type", "ml.c5.4xlarge")
        proc = self.submit(*args)
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        count, convert, combine = json.loads(proc.stdout)
        self.assertEqual(["%s-%s" % (JOB_NAME, stage) for stage in stages.STAGES],
                         [r["ProcessingJobName"] for r in (count, convert, combine)])
        self.assertEqual([4, 4, 1], [r["ProcessingResources"]["ClusterConfig"]["InstanceCount"]
                                     for r in (count, convert, combine)])
        inputs = [{i["InputName"]: i["S3Input"] for i in r["ProcessingInputs"]} for r in (count, convert, combine)]
        outputs = [{o["OutputName"]: o["S3Output"]["S3Uri"] for o in r["ProcessingOutputConfig"]["Outputs"]}
                   for r in (count, convert, combine)]
        for job_inputs in inputs[:2]:
            self.assertEqual({"S3Uri": "s3://bucket/criteo/raw", "LocalPath": "/opt/ml/processing/input/raw",
                              "S3DataType": "S3Prefix", "S3InputMode": "File",
                              "S3DataDistributionType": "ShardedByS3Key", "S3CompressionType": "None"},
                             job_inputs["raw"])
        self.assertEqual(outputs[0]["counts"], inputs[1]["counts"]["S3Uri"])
        self.assertEqual("FullyReplicated", inputs[1]["counts"]["S3DataDistributionType"])
        self.assertEqual(outputs[1]["parts"], inputs[2]["parts"]["S3Uri"])
        self.assertEqual(outputs[1]["data"], outputs[2]["data"])
        self.assertEqual("s3://bucket/criteo/out/%s/data" % JOB_NAME, outputs[2]["data"])
        for request, stage in zip((count, convert, combine), stages.STAGES):
            app_spec = request["AppSpecification"]
            self.assertRegex(app_spec["ImageUri"], r"tensorflow-training:2\.14-cpu-py310$")
            self.assertEqual(["python3", "-m", "dataprep.criteo_processing"], app_spec["ContainerEntrypoint"])
            self.assertEqual(stage, app_spec["ContainerArguments"][0])
            self.assertEqual("/opt/ml/processing/input/code/%s" % source_lib.SOURCE_ZIP,
                             request["Environment"]["PYTHONPATH"])
            self.assertEqual("s3://bucket/criteo/out/%s/code/%s" % (JOB_NAME, source_lib.SOURCE_ZIP),
                             {i["InputName"]: i["S3Input"]["S3Uri"] for i in request["ProcessingInputs"]}["code"])
        self.assertEqual(["convert", "--min_count", "3", "--shards", "8"],
                         convert["AppSpecification"]["ContainerArguments"][:5])
        # The jobs the emulation runs are these requests.
        config = sagemaker_processing.ConversionConfig(
            command="submit", input="s3://bucket/criteo/raw", output="s3://bucket/criteo/out", instance_count=4,
            job_name=JOB_NAME, role=ROLE, instance_type="ml.c5.4xlarge",
            options=stages.StageOptions(min_count=3, shards=8))
        for request, spec in zip((count, convert, combine),
                                 sagemaker_processing.conversion_jobs(config, count["AppSpecification"]["ImageUri"])):
            local = processing_job.processing_job_config(spec, ROLE)
            del local["ProcessingJobArn"]
            self.assertEqual(local, request)

    def test_bad_submissions_are_refused_before_anything_is_built(self):
        proc = self.submit("--input", "data/raw", "--output_path", "s3://bucket/out")
        self.assertEqual(1, proc.returncode)
        self.assertIn("both must be s3:// URIs", proc.stderr)


if __name__ == "__main__":
    tf.test.main()
