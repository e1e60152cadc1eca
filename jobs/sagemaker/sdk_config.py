"""The SageMaker Python SDK's configuration, validated once per content instead of at every lookup.

The library gives the SDK a configuration of its own (`submit.SDK_CONFIG`:
telemetry off, which only the configuration can say). The SDK then looks
up each of its defaults in it (`sagemaker.utils.get_sagemaker_config_value`,
some twenty lookups to submit one job) and validates the whole
configuration against its schema at every lookup, with jsonschema's
one-shot `validate`, which first checks the SDK's large schema itself
(docs/sagemaker.md says what that cost). A configuration's validity depends on its content alone, so each
content is validated once per process: the first lookup raises exactly as
before on an invalid one, and a configuration that changes is validated
again.
"""

import json
from typing import Optional, Set

# The contents (as sorted JSON) already found valid in this process.
_VALID: Set[str] = set()


def validate_once(sagemaker_config: Optional[dict] = None) -> None:
    """`sagemaker.config.validate_sagemaker_config`, skipped for a content already found valid.

    Raises:
      jsonschema.exceptions.ValidationError: the configuration does not
        match the SDK's schema (as the SDK raises it).
    """
    from sagemaker.config import config as sdk_config
    key = json.dumps(sagemaker_config, sort_keys=True, default=str)
    if key in _VALID:
        return
    sdk_config.validate_sagemaker_config(sagemaker_config)
    _VALID.add(key)


def install() -> None:
    """Makes the SDK's lookups of its defaults (`sagemaker.utils`) validate each content once."""
    import sagemaker.utils
    sagemaker.utils.validate_sagemaker_config = validate_once
