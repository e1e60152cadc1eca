"""Strict validation of the operator kinds against their official client models.

No package of PyPI, npm or Debian ships the CRDs of the Kubeflow training
operator, the MPI operator or JobSet. Their official Python clients ship the
models those CRDs describe, and a rendered manifest is checked against them
the way `kubectl apply`'s strict field validation checks it against a CRD:

* TFJob and MPIJob: the Kubeflow training SDK's models (`kubeflow-training`,
  OpenAPI-generator classes: `openapi_types` gives each field's type,
  `attribute_map` its JSON name), down through the `kubernetes` client's V1
  models they embed (object metadata, pod templates). An MPIJob
  (`kubeflow.org/v2beta1`) is checked against the SDK's MPIJob model, the only
  one published; it holds the fields both versions share.
* JobSet: the Kubeflow Trainer API's pydantic models (`kubeflow-trainer-api`),
  whose JobSet embeds its own models of the Kubernetes kinds.

Every field must be one the model declares (unknown fields are errors),
every value of the declared type, recursively, and every required field
present; the models' own checks run too (the required fields and allowed
values of the OpenAPI classes' constructors, the strict types, enums and
one-of types of the pydantic models' `from_dict`).
"""

import datetime
import re
import typing
from typing import Any, List

import pydantic

from jobs.kubernetes import manifests

OPENAPI_LIST = re.compile(r"^list\[(.*)\]$")
OPENAPI_DICT = re.compile(r"^dict\(str, (.*)\)$")
OPENAPI_PRIMITIVES = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}
OPENAPI_TIMES = ("date", "datetime")
OPENAPI_ANY = "object"
# A pydantic model holding one of several types (Quantity, IntOrString): its `from_dict` takes the bare value.
ONE_OF_FIELD = "actual_instance"


def _training_models():
    from kubeflow.training import models
    return models


def _trainer_models():
    from kubeflow_trainer_api import models
    return models


# kind -> (the module of its models, the model of the whole document).
KIND_MODELS = {manifests.TFJOB: (_training_models, "KubeflowOrgV1TFJob"),
               manifests.MPIJOB: (_training_models, "KubeflowOrgV1MPIJob"),
               manifests.JOBSET: (_trainer_models, "JobsetV1alpha2JobSet")}


def _at(path: str, key) -> str:
    return "%s[%d]" % (path, key) if isinstance(key, int) else ("%s.%s" % (path, key) if path else str(key))


def _is_a(value, types) -> bool:
    """isinstance, where a bool is no number."""
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def openapi_errors(value, type_name: str, path: str = "") -> List[str]:
    """Violations of an OpenAPI-generator type (`openapi_types` notation) by a JSON value, as `path: message`."""
    models = _training_models()  # holds the kubernetes client's models too
    if value is None:
        return []  # an absent field; the model's constructor reports a required one
    listed, mapped = OPENAPI_LIST.match(type_name), OPENAPI_DICT.match(type_name)
    if listed or mapped:
        container = list if listed else dict
        if not isinstance(value, container):
            return ["%s: expected %s, got %r" % (path, "a list" if listed else "an object", value)]
        items = enumerate(value) if listed else value.items()
        return [error for key, item in items
                for error in openapi_errors(item, (listed or mapped).group(1), _at(path, key))]
    if type_name == OPENAPI_ANY:
        return []
    if type_name in OPENAPI_PRIMITIVES:
        if _is_a(value, OPENAPI_PRIMITIVES[type_name]):
            return []
        return ["%s: expected %s, got %r" % (path, type_name, value)]
    if type_name in OPENAPI_TIMES:
        try:
            datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return ["%s: expected an RFC 3339 %s, got %r" % (path, type_name, value)]
        return []
    model = getattr(models, type_name)  # an unknown type name is a bug of this module: let it raise
    if not isinstance(value, dict):
        return ["%s: expected an object (%s), got %r" % (path, type_name, value)]
    attribute_of = {json_name: attribute for attribute, json_name in model.attribute_map.items()}
    errors = ["%s: unknown field %r of %s (it has %s)" % (_at(path, key), key, type_name, ", ".join(attribute_of))
              for key in value if key not in attribute_of]
    for key, item in value.items():
        if key in attribute_of:
            errors.extend(openapi_errors(item, model.openapi_types[attribute_of[key]], _at(path, key)))
    try:
        model(**{attribute_of[key]: item for key, item in value.items() if key in attribute_of})
    except ValueError as error:
        errors.append("%s: %s: %s" % (path or ".", type_name, error))
    return errors


def _field_types(annotation) -> List[Any]:
    """The types an annotation allows, `Optional` and `Annotated` taken off."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        return [t for arg in typing.get_args(annotation) if arg is not type(None) for t in _field_types(arg)]
    if origin is typing.Annotated:
        return _field_types(typing.get_args(annotation)[0])
    return [annotation]


def pydantic_field_errors(value, annotation, path: str = "") -> List[str]:
    """Unknown and missing fields of a JSON value under a pydantic annotation, as `path: message`.

    Types are the model's own `from_dict`'s to check (see `errors`); this walks
    the structure only, where a value has the shape its type expects.
    """
    types = _field_types(annotation)
    if len(types) != 1:
        return []  # a union of scalars
    kind = types[0]
    origin = typing.get_origin(kind)
    if origin in (list, dict) and isinstance(value, origin):
        item_type = typing.get_args(kind)[-1]
        items = enumerate(value) if origin is list else value.items()
        return [error for key, item in items for error in pydantic_field_errors(item, item_type, _at(path, key))]
    if not (isinstance(kind, type) and issubclass(kind, pydantic.BaseModel) and isinstance(value, dict)):
        return []
    if ONE_OF_FIELD in kind.model_fields:
        return []
    fields = {field.alias or name: field for name, field in kind.model_fields.items()}
    errors = ["%s: unknown field %r of %s (it has %s)" % (_at(path, key), key, kind.__name__, ", ".join(fields))
              for key in value if key not in fields]
    errors += ["%s: required field %r of %s is missing" % (path or ".", key, kind.__name__)
               for key, field in fields.items() if field.is_required() and value.get(key) is None]
    for key, item in value.items():
        if key in fields and item is not None:
            errors.extend(pydantic_field_errors(item, fields[key].annotation, _at(path, key)))
    return errors


def errors(document: dict) -> List[str]:
    """Every violation of its official model by an operator-kind document (TFJob, MPIJob, JobSet)."""
    module, name = KIND_MODELS[document["kind"]]
    model = getattr(module(), name)
    if not issubclass(model, pydantic.BaseModel):
        return openapi_errors(document, name)
    found = pydantic_field_errors(document, model)
    try:
        model.from_dict(document)
    except (ValueError, TypeError) as error:  # pydantic.ValidationError is a ValueError
        found.append("%s: %s" % (name, error))
    return found
