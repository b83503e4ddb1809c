"""The metered model operations and the media files they produce."""
from django.urls import path, re_path

from gateway import gemini_views, media_views, messages_views, responses_views, views

urlpatterns = [
    path("v1/chat/completions", views.ChatCompletionsView.as_view(), name="chat-completions"),
    path("v1/messages", messages_views.MessagesView.as_view(), name="messages"),
    path("v1/messages/count_tokens", messages_views.CountTokensView.as_view(), name="messages-count-tokens"),
    path("v1/responses", responses_views.ResponsesView.as_view(), name="responses"),
    path("v1/responses/input_tokens", responses_views.ResponseInputTokensView.as_view(),
         name="responses-input-tokens"),
    path("v1/responses/compact", responses_views.compact_not_served, name="responses-compact"),
    path("v1/responses/<str:response_id>", responses_views.ResponseView.as_view(), name="response"),
    path("v1/responses/<str:response_id>/input_items", responses_views.ResponseInputItemsView.as_view(),
         name="response-input-items"),
    path("v1/images/generations", media_views.ImageGenerationsView.as_view(), name="image-generations"),
    path("v1/audio/speech", media_views.SpeechView.as_view(), name="audio-speech"),
    path("v1/embeddings", media_views.EmbeddingsView.as_view(), name="embeddings"),
    path("media/<path:name>", media_views.serve_media, name="media"),
    # Google's Gemini API (gateway/gemini_views.py), under v1beta/ and v1/. A method follows the model after its
    # last colon; the model may hold a slash or a colon (organisation/model ids, OpenAI's fine-tunes). The
    # pattern takes any version and method, so that the view answers a wrong one in Google's shape. GET
    # v1/models and v1/models/{id} answer Google's shape to a key sent as Google's SDKs send it, else the
    # catalog's (models_catalog.views).
    re_path(r"^(?P<version>[^/]+)/models/(?P<model>.+):(?P<method>[^:]*)$",
            gemini_views.GeminiMethodView.as_view(), name="gemini"),
    path("v1beta/models", gemini_views.GeminiModelListView.as_view(), name="gemini-models"),
    path("v1beta/models/<path:model_id>", gemini_views.GeminiModelView.as_view(), name="gemini-model"),
    path("v1/models", gemini_views.model_list, name="models"),
    path("v1/models/<path:model_id>", gemini_views.model_detail, name="model"),
]
