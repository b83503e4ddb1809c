"""The admin API of upstream pools: list deployments with their health, disable and enable them by hand.

Admin keys only, like the key operations (keys.views.AdminView). It lives on the top floor
because it reads the routing's shared health (gateway.deployment_health). Every change goes through
gateway.deployments, as the staff page's buttons do, and is written to the audit log.
"""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from gateway import deployments
from keys.views import AdminView, _actor
from utils_app.json_body import parse_json_object
from utils_app.serializers import StrictCharField, StrictSerializer, optional
from utils_app.schema import error_responses

STATES = ("healthy", "cooling", "disabled", "not_configured")

DEPLOYMENT_ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH,
                                 description="The deployment's id, as GET /admin/deployments lists it.")


def _parse_optional(serializer_class, request) -> dict:
    """A body that may be left out altogether; when sent, a JSON object parsed strictly."""
    if not request.body:
        return {}
    serializer = serializer_class(data=parse_json_object(request.body))
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class DisableRequest(StrictSerializer):
    reason = optional(StrictCharField, max_length=deployments.REASON_MAX_LENGTH,
                      help_text="Why, for the staff page and the audit log. Default: 'disabled by hand' and "
                                "who did it.")


class EnableRequest(StrictSerializer):
    """No member: a body, when sent, is an empty object."""


# ---------------------------------------------------------------- answers (rendered from gateway.deployments.Row)

class LastHourOut(serializers.Serializer):
    requests = serializers.IntegerField(source="health.requests", help_text="Attempts sent to it.")
    failures = serializers.IntegerField(source="health.failures",
                                        help_text="Attempts that failed (counted against it).")
    p50_ms = serializers.FloatField(source="health.p50_ms", allow_null=True,
                                    help_text="Median time to first byte of its successful attempts, within "
                                              "about 7 %; null without any.")


class DeploymentOut(serializers.Serializer):
    id = serializers.IntegerField(source="deployment.pk")
    model = serializers.CharField(source="deployment.model.model_id", help_text="The public model id.")
    provider = serializers.CharField(source="deployment.provider.name")
    secret_env = serializers.CharField(source="deployment.secret_env",
                                       help_text="The NAME of the environment variable holding its secret, never "
                                                 "its value; empty for a provider without a secret.")
    upstream_model = serializers.CharField(source="deployment.upstream_name",
                                           help_text="The name sent upstream (the model's id unless set).")
    priority = serializers.IntegerField(source="deployment.priority")
    weight = serializers.IntegerField(source="deployment.weight")
    rpm = serializers.IntegerField(source="deployment.rpm", help_text="Cap on requests per minute; 0 = none.")
    state = serializers.ChoiceField(choices=STATES, source="health.state")
    cooldown_until = serializers.DateTimeField(allow_null=True, help_text="When a cooling deployment gets "
                                                                          "traffic again; null otherwise.")
    disabled_reason = serializers.CharField(allow_null=True)
    disabled_at = serializers.DateTimeField(source="deployment.disabled_at", allow_null=True)
    last_hour = LastHourOut(source="*")


class DeploymentListResponse(serializers.Serializer):
    deployments = DeploymentOut(many=True)


class DeploymentResponse(serializers.Serializer):
    deployment = DeploymentOut()


class DeploymentListView(AdminView):
    @extend_schema(
        operation_id="admin_list_deployments", tags=["admin"],
        summary="List deployments with their health",
        description=("Every deployment of every model (a provider with several secrets has one per secret), by "
                     "model, priority and id, with its state and last hour. `?model=ID` lists one model's; an "
                     "unknown id is a 404 `model_not_found`."),
        parameters=[OpenApiParameter("model", str, OpenApiParameter.QUERY, required=False,
                                     description="Only this model's deployments (its public id).")],
        responses={200: DeploymentListResponse, **error_responses(401, 404, 500)},
    )
    def get(self, request):
        found = deployments.listing(model_id=request.query_params.get("model"))
        return Response(DeploymentListResponse({"deployments": found}).data)


class DisableDeploymentView(AdminView):
    optional_body = True  # utils_app.schema: the body may be left out

    @extend_schema(
        operation_id="admin_disable_deployment", tags=["admin"],
        summary="Disable a deployment",
        description=("Takes this one deployment out of rotation (those sharing its secret keep serving) until it "
                     "is enabled, by hand or by a probe that finds it answering. The body is optional. Disabling "
                     "a disabled deployment changes nothing and keeps its reason. Written to the audit log."),
        parameters=[DEPLOYMENT_ID],
        request=DisableRequest,
        responses={200: DeploymentResponse, **error_responses(400, 401, 404, 500)},
        examples=[OpenApiExample("With a reason", request_only=True, value={"reason": "provider maintenance"})],
    )
    def post(self, request, id):  # noqa: A002 - the contract's name for it
        data = _parse_optional(DisableRequest, request)
        row = deployments.disable(deployment=deployments.find(id), reason=data.get("reason"), actor=_actor(request))
        return Response(DeploymentResponse({"deployment": row}).data)


class EnableDeploymentView(AdminView):
    @extend_schema(
        operation_id="admin_enable_deployment", tags=["admin"],
        summary="Enable a deployment",
        description=("Puts the deployment back in rotation now: enabled, and a cooldown it was in forgotten. "
                     "Enabling a healthy deployment changes nothing. No body (or an empty object). Written to "
                     "the audit log."),
        parameters=[DEPLOYMENT_ID],
        request=None,
        responses={200: DeploymentResponse, **error_responses(400, 401, 404, 500)},
    )
    def post(self, request, id):  # noqa: A002 - the contract's name for it
        _parse_optional(EnableRequest, request)
        row = deployments.enable(deployment=deployments.find(id), actor=_actor(request))
        return Response(DeploymentResponse({"deployment": row}).data)
