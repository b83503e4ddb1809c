"""utils_app.serializers: the strict JSON fields and base serializer the gateway and the admin API share."""
import math

import pytest
from django.urls import path
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.views import APIView

from utils_app.error_handler import validation_error
from utils_app.serializers import (
    BIGINT_MAX,
    BIGINT_MIN,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictFloatField,
    StrictIntegerField,
    StrictJsonObjectField,
    StrictListField,
    StrictSerializer,
    fail,
    optional,
)


def refusal(field, value) -> tuple[str, str]:
    """(message, code) of the error the field raises for value."""
    with pytest.raises(ValidationError) as raised:
        field.run_validation(value)
    (detail,) = raised.value.detail
    return str(detail), detail.code


# ---------------------------------------------------------------- scalar fields

def test_a_string_field_takes_a_string_and_keeps_its_whitespace():
    assert StrictCharField().run_validation("  two spaces \n") == "  two spaces \n"


@pytest.mark.parametrize("value", [5, 5.0, True, ["a"], {"a": 1}])
def test_a_string_field_refuses_every_other_json_type(value):
    assert refusal(StrictCharField(), value) == ("Must be a string.", "invalid")


def test_a_string_field_still_applies_blank_and_max_length():
    assert refusal(StrictCharField(), "")[1] == "blank"
    assert refusal(StrictCharField(max_length=3), "abcd")[1] == "max_length"
    assert StrictCharField(allow_blank=True).run_validation("") == ""


def test_a_choice_field_takes_one_of_its_choices():
    assert StrictChoiceField(choices=["url", "b64_json"]).run_validation("b64_json") == "b64_json"


def test_a_choice_field_names_the_choices_when_the_value_is_not_one():
    assert refusal(StrictChoiceField(choices=["url", "b64_json"]), "png") == (
        "Must be one of: url, b64_json.", "invalid_choice")


def test_a_choice_field_refuses_a_value_that_is_not_a_string():
    assert refusal(StrictChoiceField(choices=["1", "2"]), 1) == ("Must be a string.", "invalid")


@pytest.mark.parametrize("value", [0, -7, 10**30])
def test_an_integer_field_takes_any_json_integer(value):
    assert StrictIntegerField().run_validation(value) == value


@pytest.mark.parametrize("value", [True, False, "5", 5.0, [5], {"n": 5}])
def test_an_integer_field_refuses_booleans_strings_and_fractions(value):
    assert refusal(StrictIntegerField(), value) == ("Must be an integer.", "invalid")


def test_an_integer_field_still_applies_its_range():
    field = StrictIntegerField(min_value=1, max_value=10)
    assert field.run_validation(10) == 10
    assert refusal(field, 0)[1] == "min_value"
    assert refusal(field, 11)[1] == "max_value"


def test_a_bigint_integer_field_takes_the_whole_bigint_range():
    field = StrictIntegerField(bigint=True)
    assert field.run_validation(BIGINT_MAX) == 2**63 - 1
    assert field.run_validation(BIGINT_MIN) == -(2**63)


def test_a_bigint_integer_field_refuses_what_bigint_cannot_hold():
    field = StrictIntegerField(bigint=True)
    assert refusal(field, 2**63) == ("Must be at most 9223372036854775807.", "too_large")
    assert refusal(field, 10**30) == ("Must be at most 9223372036854775807.", "too_large")
    assert refusal(field, -(2**63) - 1) == ("Must be at least -9223372036854775808.", "too_small")


def test_a_number_field_takes_integers_and_fractions_as_floats():
    assert StrictFloatField().run_validation(2) == 2.0
    assert isinstance(StrictFloatField().run_validation(2), float)
    assert StrictFloatField().run_validation(0.25) == 0.25


@pytest.mark.parametrize("value", ["0.5", True, [1.0], {"x": 1.0}, math.nan, math.inf])
def test_a_number_field_refuses_strings_booleans_and_non_finite_values(value):
    assert refusal(StrictFloatField(), value) == ("Must be a number.", "invalid")


def test_a_number_too_large_for_a_float_is_a_validation_error_not_a_crash():
    assert refusal(StrictFloatField(), 10**400)[1] == "overflow"


def test_a_number_field_still_applies_its_range():
    field = StrictFloatField(min_value=0, max_value=2)
    assert refusal(field, 2.5)[1] == "max_value"
    assert refusal(field, -0.1)[1] == "min_value"


@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_field_takes_true_and_false(value):
    assert StrictBooleanField().run_validation(value) is value


@pytest.mark.parametrize("value", ["true", "yes", 1, 0, "on"])
def test_a_boolean_field_refuses_what_plain_drf_would_coerce(value):
    assert refusal(StrictBooleanField(), value) == ("Must be true or false.", "invalid")


def test_a_json_object_field_passes_the_object_on_untouched():
    value = {"type": "json_schema", "json_schema": {"nested": [1, None]}}
    assert StrictJsonObjectField().run_validation(value) is value


@pytest.mark.parametrize("value", [[], "{}", 1, True])
def test_a_json_object_field_refuses_anything_but_an_object(value):
    assert refusal(StrictJsonObjectField(), value) == ("Must be an object.", "invalid")


def test_a_list_field_says_what_is_wrong_in_plain_words():
    assert refusal(StrictListField(child=StrictIntegerField(), min_length=1), []) == ("Must not be empty.",
                                                                                     "min_length")
    assert refusal(StrictListField(child=StrictIntegerField(), min_length=2), [1])[0] == "Must have at least 2 items."
    assert refusal(StrictListField(child=StrictIntegerField(), max_length=2), [1, 2, 3])[0] == (
        "Must have at most 2 items.")
    assert refusal(StrictListField(child=StrictIntegerField()), "1, 2") == ("Must be an array.", "not_a_list")
    assert StrictListField(child=StrictIntegerField(), min_length=1).run_validation([1, 2]) == [1, 2]


def test_a_field_refuses_null_unless_it_is_declared_optional():
    assert refusal(StrictIntegerField(), None)[1] == "null"
    assert optional(StrictIntegerField).run_validation(None) is None


def test_a_use_can_override_a_fields_message():
    field = StrictIntegerField(error_messages={"invalid": "count must be a whole number."})
    assert refusal(field, "3") == ("count must be a whole number.", "invalid")


def test_fail_raises_one_error_with_its_code():
    with pytest.raises(ValidationError) as raised:
        fail("Must look like WIDTHxHEIGHT.", code="invalid")
    assert [(str(d), d.code) for d in raised.value.detail] == [("Must look like WIDTHxHEIGHT.", "invalid")]


# ---------------------------------------------------------------- the strict base

class Owner(StrictSerializer):
    name = StrictCharField(required=False)


class Request(StrictSerializer):
    model = StrictCharField()
    n = optional(StrictIntegerField, default=1)
    user = optional(StrictCharField)
    owner = Owner(required=False)


def first_error(serializer) -> tuple[str, str, str]:
    """(param, code, message) as utils_app.errors reports the first error of an invalid serializer."""
    assert not serializer.is_valid()
    error = validation_error(ValidationError(serializer.errors))
    return error.param, error.code, error.message


def test_a_strict_serializer_refuses_an_undeclared_member_naming_it():
    assert first_error(Request(data={"model": "m", "colour": "red"})) == (
        "colour", "unknown_parameter", "colour: Unknown parameter 'colour'.")


def test_an_undeclared_member_of_a_nested_strict_serializer_has_a_dotted_param():
    param, code, _ = first_error(Request(data={"model": "m", "owner": {"email": "a@b.c"}}))
    assert (param, code) == ("owner.email", "unknown_parameter")


def test_a_nested_strict_serializer_given_a_string_says_it_expected_an_object():
    param, code, message = first_error(Request(data={"model": "m", "owner": "ann"}))
    assert (param, code) == ("owner", "invalid_value")
    assert "Expected a dictionary" in message


def test_null_on_a_required_member_is_missing_field():
    assert first_error(Request(data={"model": None}))[:2] == ("model", "missing_field")


def test_null_on_a_non_nullable_optional_member_is_refused_not_dropped():
    assert first_error(Request(data={"model": "m", "owner": {"name": None}}))[:2] == ("owner.name", "missing_field")


def test_null_on_an_optional_member_counts_as_not_sent():
    serializer = Request(data={"model": "m", "user": None, "n": None})
    data, sent = serializer.validated()
    # Left out, and without its default: DRF applies a default only to an absent member.
    assert data == {"model": "m"}
    assert sent == {"model"}


def test_validated_returns_the_data_with_defaults_and_the_members_the_client_sent():
    data, sent = Request(data={"model": "m", "user": "ann"}).validated()
    assert data == {"model": "m", "n": 1, "user": "ann"}
    assert sent == {"model", "user"}


def test_validated_raises_when_the_request_is_invalid():
    with pytest.raises(ValidationError):
        Request(data={"model": 5}).validated()


def test_a_valid_nested_member_is_kept_as_sent():
    data, _ = Request(data={"model": "m", "owner": {"name": "  ann "}}).validated()
    assert data["owner"] == {"name": "  ann "}


def test_top_level_instances_of_one_class_validate_with_fields_built_once():
    first, second = Request(data={"model": "m"}), Request(data={"model": "n"})
    assert first.fields is second.fields
    assert first.fields["owner"].fields is second.fields["owner"].fields
    assert Request(data={"model": "m"}, partial=True).fields is not first.fields
    assert Request(data={"model": "m"}, context={"request": None}).fields is not first.fields


def test_shared_fields_keep_nothing_of_one_request_for_the_next():
    assert first_error(Request(data={"model": "m", "owner": {"name": 5}}))[:2] == ("owner.name", "invalid_value")
    data, sent = Request(data={"model": "m", "owner": {"name": "ann"}}).validated()
    assert data == {"model": "m", "n": 1, "owner": {"name": "ann"}}
    assert sent == {"model", "owner"}
    assert Request(data={"model": "m"}).validated() == ({"model": "m", "n": 1}, {"model"})


def test_a_partial_serializer_still_skips_the_members_left_out():
    # Fields read partial through their root: a partial instance must not use fields bound to another.
    serializer = Request(data={"user": "ann"}, partial=True)
    assert serializer.is_valid(), serializer.errors
    assert serializer.validated_data == {"user": "ann"}


# ---------------------------------------------------------------- OpenAPI

class Probe(StrictSerializer):
    text = StrictCharField(max_length=20)
    choice = optional(StrictChoiceField, choices=["a", "b"], default="a")
    count = StrictIntegerField(min_value=1, max_value=10)
    credits = StrictIntegerField(bigint=True, required=False)
    ratio = optional(StrictFloatField, min_value=0, max_value=2)
    flag = StrictBooleanField(required=False, default=False)
    options = optional(StrictJsonObjectField)


class ProbeView(APIView):
    @extend_schema(request=Probe, responses={204: None})
    def post(self, request):
        raise NotImplementedError


def test_the_shared_fields_describe_their_json_types_in_the_openapi_schema():
    schema = SchemaGenerator(patterns=[path("probe", ProbeView.as_view())]).get_schema(request=None, public=True)
    component = schema["components"]["schemas"]["Probe"]
    properties = component["properties"]
    # Exact: DRF refuses the empty string (no allow_blank) and NUL characters, so the schema says so.
    assert properties["text"] == {"type": "string", "minLength": 1, "maxLength": 20, "pattern": "^[^\\u0000]+$"}
    assert properties["count"] == {"type": "integer", "minimum": 1, "maximum": 10}
    assert properties["credits"] == {"type": "integer"}
    assert properties["ratio"] == {"type": "number", "nullable": True, "minimum": 0, "maximum": 2}
    assert properties["flag"] == {"type": "boolean", "default": False}
    assert properties["options"] == {"type": "object", "additionalProperties": {}, "nullable": True}
    assert properties["choice"]["default"] == "a"
    assert set(component["required"]) == {"text", "count"}
    assert component["description"] == "A serializer that refuses members it does not declare (code unknown_parameter)."
    assert component["additionalProperties"] is False
