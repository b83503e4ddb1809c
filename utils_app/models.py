from django.db import models

TOPICS = ("science", "geography", "history", "maths")


class FactQuerySet(models.QuerySet):
    def enabled(self):
        return self.filter(enabled=True)

    def random_texts(self, count: int) -> list[str]:
        """Up to ``count`` distinct facts in random order, in one query.

        ORDER BY RANDOM() sorts the whole table, which is right for a few hundred
        rows and avoids a second query to learn the ids first.
        """
        return list(self.enabled().order_by("?").values_list("text", flat=True)[:count])


class Fact(models.Model):
    """One short, true, checkable statement served by GET /utils/facts."""

    text = models.CharField(max_length=400, unique=True)
    topic = models.CharField(max_length=16, choices=[(topic, topic) for topic in TOPICS])
    enabled = models.BooleanField(default=True, help_text="Disabled facts are kept but never served.")
    updated_at = models.DateTimeField(auto_now=True)

    objects = FactQuerySet.as_manager()

    class Meta:
        ordering = ["topic", "text"]

    def __str__(self):
        return self.text
