from django.core.exceptions import ValidationError
from django.db import models

from community import links


class GuildQuerySet(models.QuerySet):
    def listed(self):
        return self.filter(listed=True)


class Guild(models.Model):
    """One of the service's own community guilds, shown by GET /v1/community/guilds.

    Only the invite code is kept: names, counts and icons come live (cached) from
    the platform, so they never go stale here.
    """

    name = models.CharField(max_length=100, help_text="Shown when the platform cannot be reached.")
    invite_code = models.CharField(max_length=links.MAX_LINK_LENGTH, unique=True,
                                   help_text="An invite code or link (discord.gg/CODE); stored as the code.")
    description = models.TextField(blank=True, help_text="Why someone would join, in a sentence or two.")
    position = models.PositiveSmallIntegerField(default=0, help_text="Lower comes first.")
    listed = models.BooleanField(default=True, help_text="Unticked guilds are kept but not shown.")
    updated_at = models.DateTimeField(auto_now=True)

    objects = GuildQuerySet.as_manager()

    class Meta:
        ordering = ["position", "name"]

    def __str__(self):
        return self.name

    def clean_fields(self, exclude=None):
        # Staff paste whole links; the same parser as the invite operation keeps only the code. Read here, with
        # the field's own checks, so a form without the field (the list's position and listed columns) leaves
        # it alone: an error named after a field the form lacks is a 500, not a message.
        super().clean_fields(exclude=exclude)
        if exclude and "invite_code" in exclude:
            return
        try:
            self.invite_code = links.invite_code(self.invite_code)
        except links.MalformedLink as exc:
            raise ValidationError({"invite_code": str(exc)}) from None

    @property
    def invite_url(self) -> str:
        return f"https://discord.gg/{self.invite_code}"
