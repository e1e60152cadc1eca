"""The built-in CTR models, by name (`deepfm.config.MODELS`).

Each is an Estimator model_fn that takes its `ModelConfig` and the
strategy's `ModelContext` from `params` (`deepfm.models.ctr`); a user's own
model_fn written the same way trains under every strategy too.
"""

from typing import Callable

from deepfm import config as config_lib


def get(name: str) -> Callable:
    """The model_fn of the built-in model `name`.

    Raises:
      ValueError: no such model; the message lists the built-in ones.
    """
    # Imported here: the package's name list is read by TensorFlow-free code.
    from deepfm.models import dcn, deepfm
    model_fns = {config_lib.DEEPFM: deepfm.model_fn, config_lib.DCN: dcn.model_fn}
    if name not in model_fns:
        raise ValueError("--model must be one of %s, got %r" % (", ".join(sorted(model_fns)), name))
    return model_fns[name]
