import hashlib
import secrets

from django.db import models
from django.db.models import Q

TIERS = ("free", "augmented", "premium", "cool", "partner", "limited", "exclusive", "special")
TIER_CHOICES = [(tier, tier) for tier in TIERS]

RPM_RANGE = (1, 1000)
RPH_RANGE = (1, 10000)
SECRET_PREFIX = "sk-"
DISPLAY_PREFIX_LENGTH = 10  # "sk-" plus 7 characters: enough to tell keys apart, useless to an attacker


def generate_secret() -> str:
    # 32 random bytes give 43 url-safe characters, above the 32 the contract asks for.
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def digest_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class ApiKeyQuerySet(models.QuerySet):
    def active(self):
        return self.filter(is_active=True)

    def by_secret(self, secret: str):
        return self.filter(digest=digest_secret(secret))


class ApiKey(models.Model):
    """An API key. The secret itself is never stored: only its SHA-256 digest."""

    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=16, editable=False, db_index=True,
                              help_text="The first characters of the secret, for recognising a key.")
    name = models.CharField(max_length=120, blank=True, help_text="A label for staff.")
    tier = models.CharField(max_length=16, choices=TIER_CHOICES, default="free")
    credits = models.BigIntegerField(default=0)
    max_credits = models.BigIntegerField(default=0)
    rpm = models.PositiveIntegerField(default=60)
    rph = models.PositiveIntegerField(default=1000)
    owner_platform_id = models.CharField(max_length=64, blank=True, db_index=True)
    owner_platform_username = models.CharField(max_length=120, blank=True, db_index=True)
    owner_platform_img = models.CharField(max_length=500, blank=True)
    owner_category = models.CharField(max_length=120, blank=True, db_index=True)
    is_admin = models.BooleanField(default=False)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        verbose_name = "API key"
        constraints = [
            # Backstops for the conditional UPDATE in keys.credits and the
            # validation of the admin API: the database refuses what code must not do.
            models.CheckConstraint(condition=Q(credits__gte=0), name="apikey_credits_non_negative"),
            models.CheckConstraint(condition=Q(max_credits__gte=0), name="apikey_max_credits_non_negative"),
            models.CheckConstraint(condition=Q(rpm__gte=RPM_RANGE[0], rpm__lte=RPM_RANGE[1]), name="apikey_rpm_range"),
            models.CheckConstraint(condition=Q(rph__gte=RPH_RANGE[0], rph__lte=RPH_RANGE[1]), name="apikey_rph_range"),
            models.CheckConstraint(condition=Q(tier__in=TIERS), name="apikey_tier_known"),
        ]

    def __str__(self):
        return f"{self.prefix}… ({self.tier})"

    @property
    def is_authenticated(self) -> bool:
        # Lets DRF treat the key as request.user.
        return True

    def set_secret(self, secret: str) -> None:
        self.digest = digest_secret(secret)
        self.prefix = secret[:DISPLAY_PREFIX_LENGTH]

    def can_use(self, model) -> bool:
        """Whether this key's tier appears in the model's access list."""
        return model.allows_tier(self.tier)

    @property
    def owner(self) -> dict:
        return {
            "platform_id": self.owner_platform_id,
            "platform_username": self.owner_platform_username,
            "platform_img": self.owner_platform_img,
            "category": self.owner_category,
        }

    def config(self) -> dict:
        """The SPEC's ApiKeyConfig."""
        return {
            "tier": self.tier,
            "credits": self.credits,
            "maxCredits": self.max_credits,
            "rpm": self.rpm,
            "rph": self.rph,
            "owner": self.owner,
        }


OWNER_FIELDS = {
    "platform_id": "owner_platform_id",
    "platform_username": "owner_platform_username",
    "platform_img": "owner_platform_img",
    "category": "owner_category",
}


class AuditLog(models.Model):
    """Who changed which key, when, from what to what. Never holds a secret."""

    actor = models.CharField(max_length=200, help_text="'key sk-…', 'staff <username>' or 'command <name>'.")
    action = models.CharField(max_length=40, db_index=True)
    key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_entries")
    key_prefix = models.CharField(max_length=16, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "audit log entry"
        verbose_name_plural = "audit log"

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.key_prefix}"

