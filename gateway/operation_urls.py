"""The metered model operations and the media files they produce."""
from django.urls import path

from gateway import views

urlpatterns = [
    path("v1/chat/completions", views.ChatCompletionsView.as_view(), name="chat-completions"),
    path("v1/messages", views.MessagesView.as_view(), name="messages"),
    path("v1/messages/count_tokens", views.CountTokensView.as_view(), name="messages-count-tokens"),
    path("v1/images/generations", views.ImageGenerationsView.as_view(), name="image-generations"),
    path("v1/audio/speech", views.SpeechView.as_view(), name="audio-speech"),
    path("v1/embeddings", views.EmbeddingsView.as_view(), name="embeddings"),
    path("media/<path:name>", views.serve_media, name="media"),
]
