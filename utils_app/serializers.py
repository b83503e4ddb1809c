"""Strict parsing of JSON request bodies, shared by the metered operations and the admin API.

One rule everywhere: a member must be a JSON value of the declared JSON type and is
never coerced (plain DRF would turn 5 into "5", "yes" or 1 into True, "2" or 2.0 into
2), and a member the serializer does not declare is refused with the code
``unknown_parameter`` instead of being quietly dropped. utils_app.error_handler turns the
first error into the error body, with the member as a dotted ``param``.

JSON null is refused by every field (DRF's code ``null``, reported as
``missing_field``) unless the field is declared ``allow_null=True``, as ``optional()``
does. On such a field null means "not given", as in the OpenAI API: StrictSerializer
leaves it out of the validated data. DRF applies a field's default only to an absent
member, not to a null one, so a serializer whose defaults must hold for null too
merges them back in (as the gateway's image, speech and embeddings requests do).
"""
from collections.abc import Mapping
from typing import Any

from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinLengthValidator,
    MinValueValidator,
    ProhibitNullCharactersValidator,
    RegexValidator,
)
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail, ValidationError
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from utils_app.speed.validation import (NOT_QUICK, GivenFieldsOnly, QuickSerializer, SharedFields, Unsure, quick_check,
                                        reproduced)
from utils_app.speed.validation import enabled as speed_enabled

# PostgreSQL bigint: a larger figure would fail in the database as a 500, not a 400.
BIGINT_MIN = -(2**63)
BIGINT_MAX = 2**63 - 1


def fail(message: str, code: str = "invalid"):
    """Raise a validation error from a custom field or validate_* method."""
    raise ValidationError(ErrorDetail(message, code=code))


# ---------------------------------------------------------------- quick checks (utils_app.speed.validation.quick_check)

def _limits(validators, low_kind, high_kind):
    """(lowest, highest, the validators besides those two) of a field: the bounds its Min/Max validators set."""
    low = high = None
    others = []
    for validator in validators:
        kind = type(validator)
        if kind is low_kind and not callable(validator.limit_value):
            low = validator.limit_value if low is None else max(low, validator.limit_value)
        elif kind is high_kind and not callable(validator.limit_value):
            high = validator.limit_value if high is None else min(high, validator.limit_value)
        else:
            others.append(validator)
    return low, high, others


def _run_others(field, others, value) -> None:
    """The rest of a field's validators, as DRF's run_validators calls them (any error is raised)."""
    for validator in others:
        if getattr(validator, "requires_context", False):
            validator(value, field)
        else:
            validator(value)


# ---------------------------------------------------------------- strict scalar fields

# DRF's CharField refuses NUL characters (PostgreSQL cannot store them); this states it in the
# schema. One or more characters, so that with allow_blank the schema reads "this, or empty".
NO_NUL = RegexValidator(r"^[^\x00]+$", message="Must not contain NUL characters.")


@extend_schema_field(OpenApiTypes.STR)
class StrictCharField(serializers.CharField):
    """A JSON string, never a coerced number; whitespace is kept as sent (prompts and names are data).

    Without ``allow_blank`` the empty string is refused (DRF's code ``blank``), so the schema
    says minLength 1: a client generated from it must never send what the service refuses.
    """

    default_error_messages = {"invalid": "Must be a string."}

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        if not kwargs.get("allow_blank", False):
            kwargs.setdefault("min_length", 1)
        super().__init__(**kwargs)
        self.validators.append(NO_NUL)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)

    def quick_check(self):
        """What run_validation returns for a non-empty string its validators pass: the string itself."""
        if type(self) is not StrictCharField or self.trim_whitespace:
            return None
        shortest, longest, rest = _limits(self.validators, MinLengthValidator, MaxLengthValidator)
        shortest = max(shortest or 0, 1)  # the empty string is for CharField.run_validation to judge
        longest = float("inf") if longest is None else longest
        no_nul = no_surrogates = False
        patterns, others = [], []
        for validator in rest:
            kind = type(validator)
            if kind is ProhibitNullCharactersValidator:
                no_nul = True
            elif kind is ProhibitSurrogateCharactersValidator:
                no_surrogates = True
            elif kind is RegexValidator:  # its search, looked up once past Django's lazily compiled pattern
                patterns.append((validator.regex.search, validator.inverse_match))
            else:
                others.append(validator)

        def check(value):
            if type(value) is not str or not shortest <= len(value) <= longest:
                raise Unsure
            if no_nul and "\x00" in value:
                raise Unsure
            if no_surrogates and not value.isascii():
                try:
                    value.encode("utf-8")  # fails on exactly the code points U+D800 to U+DFFF
                except UnicodeEncodeError:
                    raise Unsure from None
            for search, inverse in patterns:
                if (search(value) is not None) is inverse:
                    raise Unsure
            _run_others(self, others, value)
            return value
        return check


class StrictChoiceField(serializers.ChoiceField):
    """A JSON string that is one of the choices (the OpenAPI schema lists them as an enum)."""

    default_error_messages = {"invalid": "Must be a string.", "invalid_choice": "Must be one of: {choices}."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        if data not in self.choices:
            self.fail("invalid_choice", choices=", ".join(map(str, self.choices)))
        return data

    def quick_check(self):
        if type(self) is not StrictChoiceField:
            return None
        choices, others = self.choices, list(self.validators)

        def check(value):
            if type(value) is not str or value not in choices:
                raise Unsure
            _run_others(self, others, value)
            return value
        return check


@extend_schema_field(OpenApiTypes.INT)
class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: no booleans, no numeric strings, no 5.0.

    ``bigint=True`` also refuses what PostgreSQL's bigint cannot hold, for members
    stored in a BigIntegerField.
    """

    default_error_messages = {"invalid": "Must be an integer.", "too_large": "Must be at most {limit}.",
                              "too_small": "Must be at least {limit}."}

    def __init__(self, *, bigint: bool = False, **kwargs):
        self.bigint = bigint
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        if self.bigint and data > BIGINT_MAX:
            self.fail("too_large", limit=BIGINT_MAX)
        if self.bigint and data < BIGINT_MIN:
            self.fail("too_small", limit=BIGINT_MIN)
        return data

    def quick_check(self):
        if type(self) is not StrictIntegerField:
            return None
        low, high, others = _limits(self.validators, MinValueValidator, MaxValueValidator)
        if self.bigint:
            low, high = max(BIGINT_MIN, BIGINT_MIN if low is None else low), min(BIGINT_MAX, BIGINT_MAX if high is None
                                                                                 else high)

        def check(value):
            if type(value) is not int or (low is not None and value < low) or (high is not None and value > high):
                raise Unsure
            _run_others(self, others, value)
            return value
        return check


@extend_schema_field(OpenApiTypes.NUMBER)
class StrictFloatField(serializers.FloatField):
    """A JSON number (integer or fraction), returned as a float; not a string, not a boolean."""

    default_error_messages = {"invalid": "Must be a number."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        # DRF's FloatField refuses NaN, the infinities and integers too large for a float.
        return super().to_internal_value(data)


@extend_schema_field(OpenApiTypes.BOOL)
class StrictBooleanField(serializers.BooleanField):
    """JSON true or false: DRF's BooleanField would also take "yes", "on" and 1."""

    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data

    def quick_check(self):
        if type(self) is not StrictBooleanField or self.validators:
            return None

        def check(value):
            if type(value) is not bool:
                raise Unsure
            return value
        return check


@extend_schema_field(OpenApiTypes.OBJECT)
class StrictJsonObjectField(serializers.Field):
    """Any JSON object, passed on untouched (tool schemas, response_format and the like)."""

    default_error_messages = {"invalid": "Must be an object."}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class StrictListField(serializers.ListField):
    """A JSON array, its items checked by ``child``; messages in the words of the other strict fields."""

    default_error_messages = {"not_a_list": "Must be an array.", "empty": "Must not be empty.",
                              "min_length": "Must have at least {min_length} items.",
                              "max_length": "Must have at most {max_length} items."}

    def __init__(self, **kwargs):
        if kwargs.get("min_length") == 1:  # not "at least 1 items"
            kwargs.setdefault("error_messages", {})["min_length"] = self.default_error_messages["empty"]
        super().__init__(**kwargs)

    def quick_check(self):
        """Each item through the child's quick check, then the list's length."""
        if type(self) is not StrictListField:
            return None
        item = quick_check(self.child)
        shortest, longest, others = _limits(self.validators, MinLengthValidator, MaxLengthValidator)
        shortest = max(shortest or 0, 0 if self.allow_empty else 1)
        longest = float("inf") if longest is None else longest

        def check(value):
            if type(value) is not list or not shortest <= len(value) <= longest:
                raise Unsure
            items = [item(one) for one in value]
            _run_others(self, others, items)
            return items
        return check


def optional(field_class, **kwargs):
    """A member that may be left out or sent as null (which then counts as not sent)."""
    kwargs.setdefault("required", False)
    kwargs.setdefault("allow_null", True)
    return field_class(**kwargs)


# ---------------------------------------------------------------- the strict base

class StrictSerializer(SharedFields, GivenFieldsOnly, serializers.Serializer):
    """A serializer that refuses members it does not declare (code unknown_parameter)."""
    # The docstring above is also the OpenAPI description of every subclass without its own.

    # JSON-schema keywords merged into the serializer's OpenAPI component (utils_app.schema):
    # what validation enforces beyond the fields themselves. A subclass with cross-member rules
    # extends it, so the schema never calls valid what the service refuses.
    schema_rules: dict[str, Any] = {"additionalProperties": False}
    # DRF's own, set by is_valid (and by the quick path below): the validation errors by member.
    _errors: dict[str, Any]

    # Validates with fields bound once per class (utils_app.speed.validation.SharedFields).

    @reproduced(refuses_unknown=True)
    def to_internal_value(self, data):
        # Not a mapping: DRF's own "Expected a dictionary" error, not one error per character.
        if isinstance(data, Mapping):
            for name in data:
                if name not in self.fields:
                    raise ValidationError({name: [ErrorDetail(f"Unknown parameter '{name}'.",
                                                              code="unknown_parameter")]})
        validated = super().to_internal_value(data)
        # Only a field declared allow_null lets a null through; it means "not given".
        return {name: value for name, value in validated.items() if value is not None}

    def validated(self) -> tuple[dict, set]:
        """(validated members with defaults, names the client actually sent with a value); raises when invalid.

        A body the quick path vouches for (utils_app.speed.validation.QuickSerializer) is not validated again;
        any other is validated DRF's way, which raises its errors.
        """
        quick = self._quick() if speed_enabled() else None
        if quick is not None:
            try:
                self._validated_data, self._errors = quick.run(self.initial_data, self), {}
            except NOT_QUICK:
                pass
        self.is_valid(raise_exception=True)
        data = dict(self.validated_data)
        sent = {name for name, value in self.initial_data.items() if value is not None}
        return data, sent

    def _quick(self) -> QuickSerializer | None:
        """The class's quick validation, for an instance validating with the class's shared fields."""
        if self.parent is not None or self.partial or self._context or not hasattr(self, "initial_data"):
            return None
        kind = type(self)
        if self.fields is not kind._class_fields():
            return None
        quick = kind.__dict__.get("_quick_serializer", False)
        if quick is False:
            quick = QuickSerializer.of(kind.__dict__["_prototype"])
            kind._quick_serializer = quick
        return quick
