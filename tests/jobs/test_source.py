"""Tests of jobs.source: the project's source as a container gets it."""

import gzip
import io
import os
import tarfile
import zipfile

import tensorflow as tf

from jobs import source as source_lib


class SourceTarballTest(tf.test.TestCase):

    def test_holds_the_entry_point_and_packages_and_is_reproducible(self):
        root = self.get_temp_dir()
        first = source_lib.write_source_tarball(os.path.join(root, "a.tar.gz"))
        second = source_lib.write_source_tarball(os.path.join(root, "b.tar.gz"))
        with open(first, "rb") as f, open(second, "rb") as g:
            self.assertEqual(f.read(), g.read())
        with open(first, "rb") as f:
            names = tarfile.open(fileobj=io.BytesIO(gzip.decompress(f.read()))).getnames()
        self.assertIn("sagemaker_entry_point.py", names)
        for module in ("deepfm/train.py", "strategies/ps.py", "input_pipeline/pipeline.py", "jobs/sagemaker/env.py"):
            self.assertIn(module, names)
        self.assertFalse([name for name in names if "__pycache__" in name or name.startswith("tests/")])

    def test_a_source_dir_goes_to_the_root_beside_the_packages(self):
        source_dir = self.create_tempdir().full_path
        os.makedirs(os.path.join(source_dir, "mymodels", "__pycache__"))
        for name, text in (("train_mine.py", "import sagemaker_entry_point\n"), ("mymodels/fm.py", "X = 1\n"),
                           ("mymodels/__pycache__/fm.cpython-310.pyc", "")):
            with open(os.path.join(source_dir, name), "w") as f:
                f.write(text)
        path = source_lib.write_source_tarball(os.path.join(self.get_temp_dir(), "user.tar.gz"),
                                                  source_dir=source_dir)
        with open(path, "rb") as f:
            archive = tarfile.open(fileobj=io.BytesIO(gzip.decompress(f.read())))
            names = archive.getnames()
            self.assertEqual(b"X = 1\n", archive.extractfile("mymodels/fm.py").read())
        self.assertContainsSubset(["train_mine.py", "mymodels/fm.py", "sagemaker_entry_point.py", "deepfm/train.py"],
                                  names)
        self.assertFalse([name for name in names if "__pycache__" in name])

    def test_a_source_dir_file_may_not_replace_the_projects(self):
        source_dir = self.create_tempdir().full_path
        os.makedirs(os.path.join(source_dir, "deepfm"))
        open(os.path.join(source_dir, "deepfm", "x.py"), "w").close()
        with self.assertRaisesRegex(ValueError, "deepfm/x.py has the name of one of this project's files"):
            source_lib.source_files(source_dir=source_dir)

    def test_the_zip_holds_the_same_files_and_is_reproducible(self):
        root = self.get_temp_dir()
        first = source_lib.write_source_zip(os.path.join(root, "a.zip"))
        second = source_lib.write_source_zip(os.path.join(root, "b.zip"))
        with open(first, "rb") as f, open(second, "rb") as g:
            self.assertEqual(f.read(), g.read())
        with zipfile.ZipFile(first) as archive:
            self.assertEqual(sorted(name for name, _ in source_lib.source_files()), sorted(archive.namelist()))


if __name__ == "__main__":
    tf.test.main()
