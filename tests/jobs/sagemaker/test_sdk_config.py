"""Tests of jobs.sagemaker.sdk_config: the SDK's lookups validate each configuration content once."""

import copy
from unittest import mock

import tensorflow as tf

from jobs.sagemaker import sdk_config, submit
from tests.jobs.sagemaker.test_submit import sdk_missing

TELEMETRY_KEY = "SageMaker.PythonSDK.Modules.TelemetryOptOut"


class ValidateOnceTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        reason = sdk_missing()
        if reason:
            self.skipTest("the SageMaker Python SDK (the 'sdk' extra) is not installed: %s" % reason)
        submit.import_sdk()
        import jsonschema
        import sagemaker.utils
        from sagemaker.config import config as config_module
        self.config_module, self.jsonschema, self.utils = config_module, jsonschema, sagemaker.utils

    def lookups(self, config, times):
        """`times` lookups of the telemetry opt-out in `config`, as the SDK makes them; the SDK's validations."""
        with mock.patch.object(self.config_module, "validate_sagemaker_config",
                               wraps=self.config_module.validate_sagemaker_config) as validate:
            values = [self.utils.get_sagemaker_config_value(None, TELEMETRY_KEY, sagemaker_config=config)
                      for _ in range(times)]
        return values, validate.call_count

    def test_the_sdks_lookups_go_through_it(self):
        self.assertIs(sdk_config.validate_once, self.utils.validate_sagemaker_config)

    def test_a_valid_content_is_validated_once_and_its_values_found(self):
        config = dict(copy.deepcopy(submit.SDK_CONFIG), SchemaVersion="1.0")
        config["SageMaker"]["PythonSDK"]["Modules"]["TelemetryOptOut"] = False  # a content not validated yet
        values, validations = self.lookups(config, 3)
        self.assertEqual([False, False, False], values)
        self.assertEqual(1, validations)
        self.assertEqual(([False], 0), self.lookups(copy.deepcopy(config), 1))

    def test_an_invalid_content_is_refused_at_every_lookup(self):
        config = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": "no"}}}}
        for _ in range(2):
            with self.assertRaisesRegex(self.jsonschema.ValidationError, "'no' is not of type 'boolean'"):
                self.utils.get_sagemaker_config_value(None, TELEMETRY_KEY, sagemaker_config=config)

    def test_a_changed_content_is_validated_again(self):
        config = copy.deepcopy(submit.SDK_CONFIG)
        self.assertEqual([True], self.lookups(config, 1)[0])
        config["SageMaker"]["PythonSDK"]["Modules"]["TelemetryOptOut"] = 1
        with self.assertRaisesRegex(self.jsonschema.ValidationError, "1 is not of type 'boolean'"):
            self.utils.get_sagemaker_config_value(None, TELEMETRY_KEY, sagemaker_config=config)


if __name__ == "__main__":
    tf.test.main()
