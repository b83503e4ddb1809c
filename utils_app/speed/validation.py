"""The strict request serializers' validation in one pass (switch: SPEED_ONE_PASS_VALIDATION).

Three parts, each relying on parts of DRF's API it does not promise to keep (Serializer.fields,
get_fields, BindingDict, _writable_fields, and DRF's order of validation steps):

- SharedFields: a top-level serializer binds its declared fields once per class instead of DRF
  deep-copying them for every instance, and ``with_data`` copies a data-less instance instead of
  running DRF's constructors;
- GivenFieldsOnly: validation visits the members the data names and the fields that act when
  left out, not every declared field (DRF raises and catches a SkipField for each one left out);
- QuickSerializer: a valid body is validated in one pass over the serializer's plan, with the
  strict fields' own quick checks; anything it cannot vouch for is validated DRF's way from the
  start, so errors are always DRF's own.

The plain twin is DRF's own validation, which every part falls back to when the switch is off
(``enabled()``). tests/utils_app/test_speed.py runs the same bodies through both and compares
values and errors; bench/pieces_cpu.py measures one against the other.
"""
import threading
from collections.abc import Mapping

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.fields import SkipField, empty, get_error_detail
from rest_framework.utils.serializer_helpers import BindingDict


def enabled() -> bool:
    """Whether the one-pass validation is on (SPEED_ONE_PASS_VALIDATION), else DRF's own throughout."""
    return settings.SPEED_ONE_PASS_VALIDATION


def _build_fields(serializer) -> BindingDict:
    """What DRF's Serializer.fields does: deep-copy the declared fields and bind them to ``serializer``."""
    fields = BindingDict(serializer)
    for name, field in serializer.get_fields().items():
        fields[name] = field
    return fields


def _build_nested_fields(field) -> None:
    """Build the fields of every serializer below ``field`` now, so nothing is built lazily later."""
    if isinstance(field, serializers.Serializer):
        for nested in field.fields.values():
            _build_nested_fields(nested)
    child = getattr(field, "child", None)  # ListField and ListSerializer
    if child is not None:
        _build_nested_fields(child)


class SharedFields:
    """Mixed into a Serializer: its top-level instances validate with fields bound once per class.

    DRF deep-copies the declared fields for every serializer instance, so that one instance may
    change its fields without touching the others. Nothing here does that, and for the chat
    request the copy (some 30 fields, nested message serializers included) costs more than the
    validation itself. So a top-level serializer binds its fields once, to a data-less instance
    of its class, and every later instance validates with those: fields keep no per-request
    state while validating. Serializers nested in another, or made with a context or
    partial=True (which fields read through their root), build their own as DRF does — the
    plain path the tests compare against.
    """

    _shared_fields_lock = threading.Lock()
    # Set on each class by _class_fields (read through the class's own __dict__).
    _prototype: "SharedFields"
    _shared_fields: BindingDict

    @property
    def fields(self):
        fields = self.__dict__.get("_bound_fields")
        if fields is None:
            if self.parent is None and not self.partial and not self._context and enabled():
                fields = type(self)._class_fields()
            else:
                fields = _build_fields(self)
            self.__dict__["_bound_fields"] = fields
        return fields

    @classmethod
    def _class_fields(cls) -> BindingDict:
        fields = cls.__dict__.get("_shared_fields")
        if fields is None:
            with SharedFields._shared_fields_lock:
                fields = cls.__dict__.get("_shared_fields")
                if fields is None:
                    prototype = cls()
                    fields = _build_fields(prototype)
                    for field in fields.values():
                        _build_nested_fields(field)
                    prototype.__dict__["_bound_fields"] = fields
                    cls._prototype = prototype
                    cls._shared_fields = fields
        return fields

    @classmethod
    def with_data(cls, data):
        """``cls(data=data)``, made by copying the class's data-less instance instead of running
        DRF's constructors.

        Field.__init__ walks the class's method resolution order to merge its error messages and
        sets some twenty attributes, for a serializer whose every attribute but the data is the
        same from one request to the next. The copy takes the instance's dict as it stands
        (``_bound_fields`` included), then what ``cls(data=data)`` makes its own: the data, the
        arguments it was called with, and a context and style of its own. Only for a top-level
        serializer without context or partial, as the shared fields are; DRF's constructor when the
        switch is off.
        """
        if not enabled():
            return cls(data=data)
        cls._class_fields()
        serializer = object.__new__(cls)
        serializer.__dict__.update(cls.__dict__["_prototype"].__dict__)
        serializer._args = ()
        serializer._kwargs = {"data": data}
        serializer.initial_data = data
        serializer._context = {}
        serializer.style = {}
        return serializer


# ---------------------------------------------------------------- quick validation: its markers

class Unsure(Exception):
    """A quick check cannot vouch for a value: DRF's own path decides, and words any error."""


# What makes the quick path hand a body to DRF's: its own doubt, or an error a field or validator raised.
NOT_QUICK = (Unsure, ValidationError, DjangoValidationError, SkipField)

# to_internal_value functions the quick path reproduces -> whether they refuse members not declared.
_REPRODUCED: dict = {}


def reproduced(*, refuses_unknown: bool):
    """Marks a serializer's to_internal_value as one the quick path does the same as (``quick_check``)."""
    def mark(function):
        _REPRODUCED[function] = refuses_unknown
        return function
    return mark


class GivenFieldsOnly:
    """Mixed into a Serializer: validation visits only the fields the data names, and those that act
    when left out (required ones, which fail, and ones with a default, which supply it).

    DRF's Serializer.to_internal_value visits every declared field: for each one left out it reads
    the data, runs the field's empty-value checks and raises SkipField, caught at once. A chat
    request declares 21 members and each message 6, and a typical request names four and two of
    them: the skipped ones were some 40 % of validating it (docs/performance.md). A field left out
    that is not required and has no default always ends in that SkipField, so not visiting it
    changes nothing: the same values, the same errors in the same order. A partial serializer, or
    one made with a context (which fields read through their root), takes DRF's own path: the path
    the tests compare this one against.
    """

    @reproduced(refuses_unknown=False)
    def to_internal_value(self, data):
        root = self.root
        if not isinstance(data, Mapping) or root.partial or root._context or not enabled():
            return super().to_internal_value(data)
        values, errors = {}, {}
        for field in self._writable_fields:
            name = field.field_name
            if name not in data and not field.required and field.default is empty:
                continue
            check = getattr(self, f"validate_{name}", None)
            try:
                value = field.run_validation(field.get_value(data))
                if check is not None:
                    value = check(value)
            except ValidationError as exc:
                errors[name] = exc.detail
            except DjangoValidationError as exc:
                errors[name] = get_error_detail(exc)
            except SkipField:
                continue
            else:
                self.set_value(values, field.source_attrs, value)
        if errors:
            raise ValidationError(errors)
        return values


# ---------------------------------------------------------------- quick validation

def quick_check(field):
    """A callable giving what ``field.run_validation(value)`` gives for a value that is neither absent nor
    null, or raising one of NOT_QUICK when it cannot tell (the value may be invalid, or unusual).

    A field class may offer a faster one through a ``quick_check()`` method of its own (the strict
    fields do, each for its exact class only); a serializer whose validation is the one described in
    QuickSerializer gets one; any other field is checked by its own run_validation.
    """
    found = field.__dict__.get("_quick_check")
    if found is None:
        offered = getattr(field, "quick_check", None)
        found = offered() if offered is not None else None
        if found is None and isinstance(field, serializers.Serializer):
            found = QuickSerializer.of(field)
        if found is None:
            found = field.run_validation
        field.__dict__["_quick_check"] = found
    return found


class QuickSerializer:
    """A serializer's validation of a valid body without DRF's walk over every declared field.

    DRF's Serializer.run_validation, for a serializer that keeps its own validation (no validators,
    its to_internal_value GivenFieldsOnly's or one marked ``reproduced``): each declared writable
    field, in order, takes the member of its name (run through ``quick_check``), or its default when
    left out; a null goes through as None where the field allows it; then ``validate_<name>`` and
    the serializer's ``validate``. Anything else (a member not declared where that is refused, a
    required one left out, a null not allowed, a value a check cannot vouch for) raises Unsure, and
    the caller validates the body DRF's way from the start: errors are always DRF's own. For a
    chat request this is most of validating it (docs/performance.md).
    """

    def __init__(self, serializer, refuses_unknown: bool):
        self.serializer = serializer
        self.refuses_unknown = refuses_unknown
        self.names = frozenset(serializer.fields)
        self.plan = [(field.field_name, field, quick_check(field),
                      f"validate_{field.field_name}" if hasattr(serializer, f"validate_{field.field_name}") else None)
                     for field in serializer._writable_fields]

    @classmethod
    def of(cls, serializer) -> "QuickSerializer | None":
        """The quick validation of ``serializer`` (bound, with its fields), or None when it validates its own way."""
        kind = type(serializer)
        refuses_unknown = _REPRODUCED.get(kind.to_internal_value)
        # Its validators as DRF's run_validators would find them, without caching them on the instance.
        validators = serializer.__dict__.get("_validators")
        if validators is None:
            validators = serializer.get_validators()
        if (refuses_unknown is None or serializer.partial or validators
                or kind.run_validation is not serializers.Serializer.run_validation
                or kind.run_validators is not serializers.Serializer.run_validators
                or kind.validate_empty_values is not serializers.Serializer.validate_empty_values):
            return None
        # Each member read by its name, as DRF's own get_value reads a JSON object's.
        if any(field.source_attrs != [field.field_name] or type(field).get_value not in _PLAIN_GET_VALUE
               for field in serializer._writable_fields):
            return None
        return cls(serializer, refuses_unknown)

    def __call__(self, data):
        return self.run(data, self.serializer)

    def run(self, data, serializer):
        """The validated data of ``data`` for ``serializer`` (this one's, or a copy with the same fields)."""
        if type(data) is not dict:
            raise Unsure
        if self.refuses_unknown:
            names = self.names
            for name in data:
                if name not in names:
                    raise Unsure
        values = {}
        for name, field, check, validate_name in self.plan:
            if name in data:
                value = data[name]
                if value is not None:
                    value = check(value)
                elif not field.allow_null:
                    raise Unsure
            elif field.required:
                raise Unsure
            elif field.default is empty:
                continue
            else:
                value = field.get_default()
            if validate_name is not None:
                value = getattr(serializer, validate_name)(value)
            values[name] = value
        if self.refuses_unknown:  # StrictSerializer: a null means "not given"
            values = {name: value for name, value in values.items() if value is not None}
        return serializer.validate(values)


# DRF's get_value methods, which read a JSON object's member by the field's name (the others differ
# for HTML form input only).
_PLAIN_GET_VALUE = frozenset({serializers.Field.get_value, serializers.ListField.get_value,
                              serializers.Serializer.get_value})


