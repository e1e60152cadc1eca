"""The project's source as a container gets it: a tarball for the training toolkit, a zip for Python.

The entry point (`examples/sagemaker_entry_point.py`) goes to the archive's
root, the project's packages keep their paths, and a user's `source_dir`
joins them at the root. Both archives are byte-identical for the same files.
This module never imports TensorFlow.
"""

import gzip
import io
import os
import tarfile
import zipfile
from typing import List, Optional, Tuple

from jobs.spec import ENTRY_POINT

# Where the entry point lives in this project.
ENTRY_POINT_SOURCE = "examples/sagemaker_entry_point.py"
# The project's packages, the one list of what a job ships: the SageMaker source tarball and the
# Kubernetes image's Dockerfile both copy exactly these (setup.cfg installs the same; a test checks).
SOURCE_PACKAGES = ("deepfm", "strategies", "planner", "input_pipeline", "dataprep", "jobs", "cli")
SOURCE_TARBALL = "sourcedir.tar.gz"
# Reproducible tarballs: every member gets this modification time.
TARBALL_MTIME = 0
SOURCE_ZIP = "deepfm-source.zip"
# Reproducible zip archives: every member gets this time (the earliest zip can hold).
ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)


def project_root() -> str:
    """The directory holding this project's packages and entry point."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_files(root: Optional[str] = None, source_dir: Optional[str] = None) -> List[Tuple[str, str]]:
    """The files shipped to the container: (name in the archive, path).

    This project's entry point goes to the archive's root, where the toolkit
    runs it, and the packages' modules keep their paths (relative to
    `root`); the files of the user's `source_dir` (absolute paths) go to the
    root beside them.

    Raises:
      ValueError: a file of `source_dir` has the name of one of the
        project's (it would replace it).
    """
    root = root or project_root()
    found = [(ENTRY_POINT, os.path.join(root, ENTRY_POINT_SOURCE))]
    for package in SOURCE_PACKAGES:
        for directory, subdirs, names in os.walk(os.path.join(root, package)):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            found += sorted((os.path.relpath(path, root), path) for path in (
                os.path.join(directory, name) for name in names if name.endswith(".py")))
    if source_dir:
        taken = {name for name, _ in found} | {name.split("/", 1)[0] for name, _ in found}
        for directory, subdirs, names in os.walk(source_dir):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(n for n in names if not n.startswith(".") and not n.endswith(".pyc")):
                path = os.path.join(directory, name)
                archived = os.path.relpath(path, source_dir)
                if archived in taken or archived.split(os.sep, 1)[0] in taken:
                    raise ValueError("--source_dir %r: %s has the name of one of this project's files or packages; "
                                     "rename it" % (source_dir, archived))
                found.append((archived, path))
    return found


def _source_contents(root: Optional[str], source_dir: Optional[str] = None) -> List[Tuple[str, bytes]]:
    contents = []
    for name, path in source_files(root, source_dir):
        with open(path, "rb") as f:
            contents.append((name, f.read()))
    return contents


def write_source_tarball(path: str, root: Optional[str] = None, source_dir: Optional[str] = None) -> str:
    """Packs `source_files` (with `source_dir`'s) into a gzipped tarball at `path` (byte-identical for the same files).

    Returns:
      `path`.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in _source_contents(root, source_dir):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = TARBALL_MTIME
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    with open(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=TARBALL_MTIME) as gz:
        gz.write(buffer.getvalue())
    return path


def write_source_zip(path: str, root: Optional[str] = None) -> str:
    """Packs `source_files` into a zip archive at `path` (byte-identical for the same files).

    Python imports the packages straight from it when it is on `PYTHONPATH`
    (how a processing container, which has no toolkit to unpack a tarball,
    runs the project's modules).

    Returns:
      `path`.
    """
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in _source_contents(root):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return path
