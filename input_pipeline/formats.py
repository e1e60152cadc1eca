"""The registry of data formats: every format behind one interface (`DataFormat`), by name.

Everything that differs between the on-disk formats of a dataset lives in
its `DataFormat` (`input_pipeline.format_base`); the rest of the input
pipeline asks the format object and never compares format names::

    fmt = formats.get("libsvm")      # parsed once, at the entry point
    fmt.extension                     # ".libsvm"
    fmt.count_rows(path)              # rows of a file, read in plain Python
    fmt.records(paths, config)        # tf.data: the undecoded records of files
    fmt.batches(paths, config, 1024)  # tf.data: batches of them, without single-record elements
    fmt.decode_batch(batch, config)   # (features, labels) of a batch of records

A format is in the manner of tf.estimator's `Head` or Horovod's
`Compressor`: a stateless object; the options only one format reads
(`DataFormat.options`, fields of `pipeline.PipelineConfig`, read through
`read_options.ReadOptions`) are validated by the format, and an option of
another format that is set is refused (`check_options`). The registered
formats, each in a module of its own:

* `TFRECORD` (`tfrecord`, `input_pipeline.format_tfrecord`): one
  `tf.train.Example` per row; the format SageMaker Pipe mode carries.
  Option: `max_corrupted_records`.
* `TFRECORD_PACKED` (`tfrecord_packed`, files `.tfrecord-packed`,
  `input_pipeline.format_tfrecord_packed`): TFRecord whose
  `tf.train.Example`s hold up to `PACKED_ROWS_PER_RECORD` rows each; Pipe
  mode carries it too, and TFRecord's damage checks and option apply.
* `LIBSVM` (`libsvm`, `input_pipeline.format_libsvm`): one `label
  id:value ...` line per row. Option: `skip_bad_records`. Its `suggestion`
  is the one command converting the files to TFRecord
  (`dataprep.libsvm_to_tfrecord`).

This module imports no TensorFlow when it is imported, so that the
TensorFlow-free data tools (`dataprep`) can name formats and files.
"""

from typing import Dict, List, Mapping, Union

from input_pipeline import format_base, format_libsvm, format_tfrecord, format_tfrecord_packed
from input_pipeline.read_options import ReadOptions

DataFormatLike = Union[str, format_base.DataFormat]
_REGISTRY: Dict[str, format_base.DataFormat] = {}


def register(data_format: format_base.DataFormat) -> format_base.DataFormat:
    """Adds a format to the registry under its name; returns it.

    Raises:
      ValueError: the name is taken.
    """
    if data_format.name in _REGISTRY:
        raise ValueError("data format %r is registered twice" % data_format.name)
    _REGISTRY[data_format.name] = data_format
    return data_format


TFRECORD = register(format_tfrecord.TFRecordFormat())
TFRECORD_PACKED = register(format_tfrecord_packed.PackedTFRecordFormat())
LIBSVM = register(format_libsvm.LibSVMFormat())


def names() -> List[str]:
    """The registered format names, in registration order (TFRecord first)."""
    return list(_REGISTRY)


def get(name: str) -> format_base.DataFormat:
    """The format registered as `name`.

    Raises:
      ValueError: no such format; the message lists the registered ones.
    """
    data_format = _REGISTRY.get(name) if isinstance(name, str) else None
    if data_format is None:
        raise ValueError("data_format must be one of %s, got %r" % (", ".join(_REGISTRY), name))
    return data_format


def as_format(data_format: DataFormatLike) -> format_base.DataFormat:
    """A format given as itself or by name (library calls may pass either).

    Raises:
      ValueError: an unknown name.
    """
    return data_format if isinstance(data_format, format_base.DataFormat) else get(data_format)


def extensions() -> Mapping[str, str]:
    """Format name -> file extension, for every registered format."""
    return {fmt.name: fmt.extension for fmt in _REGISTRY.values()}


def check_pipe_mode(data_format: format_base.DataFormat) -> None:
    """Raises ValueError unless SageMaker Pipe mode can carry `data_format`.

    The message names the formats Pipe mode carries.
    """
    if not data_format.supports_pipe_mode:
        carried = " or ".join(fmt.display_name for fmt in _REGISTRY.values() if fmt.supports_pipe_mode)
        raise ValueError("Pipe mode reads %s channels only, got data_format=%r" % (carried, data_format.name))


def check_options(data_format: format_base.DataFormat, config: ReadOptions) -> None:
    """Checks the format options in `config` for `data_format`.

    An option of another registered format that is set is refused; then the
    format checks the values of its own (`DataFormat.check_options`).

    Raises:
      ValueError: an option of another format is set (the message names
        the option, its value and the format it belongs to), or a bad value
        of the format's own.
    """
    for other in _REGISTRY.values():
        for option in other.options:
            value = getattr(config, option)
            if option not in data_format.options and value:
                raise ValueError("%s=%r applies to %s only, got data_format=%r"
                                 % (option, value, other.display_name, data_format.name))
    data_format.check_options(config)
