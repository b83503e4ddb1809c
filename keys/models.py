import hashlib
import secrets

from django.db import models
from django.db.models import Q

TIERS = ("free", "augmented", "premium", "cool", "partner", "limited", "exclusive", "special")
TIER_CHOICES = [(tier, tier) for tier in TIERS]

RPM_RANGE = (1, 1000)
RPH_RANGE = (1, 10000)
MAX_CONCURRENT_RANGE = (1, 1000)
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
    max_concurrent = models.PositiveIntegerField(
        default=16, help_text="Requests of this key in flight at once (streams count until they end).")
    # Charges of this key still pending (LedgerEntry rows with status 'pending'). Kept on the
    # row so the charge can check maxConcurrent under the row lock it already takes;
    # reconcile checks it against the ledger.
    in_flight = models.PositiveIntegerField(default=0, editable=False)
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
            # Backstops for the conditional UPDATE in gateway.metering and the
            # validation of the admin API: the database refuses what code must not do.
            models.CheckConstraint(condition=Q(credits__gte=0), name="apikey_credits_non_negative"),
            models.CheckConstraint(condition=Q(max_credits__gte=0), name="apikey_max_credits_non_negative"),
            models.CheckConstraint(condition=Q(rpm__gte=RPM_RANGE[0], rpm__lte=RPM_RANGE[1]), name="apikey_rpm_range"),
            models.CheckConstraint(condition=Q(rph__gte=RPH_RANGE[0], rph__lte=RPH_RANGE[1]), name="apikey_rph_range"),
            models.CheckConstraint(condition=Q(tier__in=TIERS), name="apikey_tier_known"),
            models.CheckConstraint(condition=Q(credits__lte=models.F("max_credits")),
                                   name="apikey_credits_within_max"),
            models.CheckConstraint(condition=Q(max_concurrent__gte=MAX_CONCURRENT_RANGE[0],
                                               max_concurrent__lte=MAX_CONCURRENT_RANGE[1]),
                                   name="apikey_max_concurrent_range"),
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
        """The SPEC's ApiKeyConfig, with maxConcurrent (CONTRACT.md §5)."""
        return {
            "tier": self.tier,
            "credits": self.credits,
            "maxCredits": self.max_credits,
            "rpm": self.rpm,
            "rph": self.rph,
            "maxConcurrent": self.max_concurrent,
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



LEDGER_KINDS = ("grant", "charge", "refund", "refill", "adjustment")
LEDGER_STATUSES = ("pending", "completed", "refunded", "abandoned")


class LedgerEntry(models.Model):
    """One change of a key's balance. A key's credits always equal the sum of its entries' amounts.

    A charge is written pending, by the same statement that takes the credits, and
    settled once: completed (the upstream answered), refunded (it failed; a refund
    entry records what was given back) or abandoned (the worker never settled it;
    settle_stale refunds it). Every other change (the grant at creation, refills,
    admin and staff edits) is written completed, in the transaction of the change.
    """

    GRANT, CHARGE, REFUND, REFILL, ADJUSTMENT = LEDGER_KINDS
    PENDING, COMPLETED, REFUNDED, ABANDONED = LEDGER_STATUSES

    key = models.ForeignKey(ApiKey, on_delete=models.PROTECT, related_name="ledger")
    kind = models.CharField(max_length=16, choices=[(k, k) for k in LEDGER_KINDS])
    amount = models.BigIntegerField(help_text="Signed: negative takes credits, positive gives them.")
    balance_after = models.BigIntegerField()
    status = models.CharField(max_length=16, choices=[(s, s) for s in LEDGER_STATUSES], default=COMPLETED)
    actor = models.CharField(max_length=200, blank=True, help_text="Who made a change other than a request.")
    request_id = models.CharField(max_length=128, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    operation = models.CharField(max_length=16, blank=True)
    # The public model id as text: the ledger must outlive edits of the catalog.
    model = models.CharField(max_length=120, blank=True)
    provider = models.CharField(max_length=64, blank=True)
    charge = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="refunds",
                               help_text="For a refund: the charge it gives back.")
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "ledger entry"
        verbose_name_plural = "ledger"
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["key", "-created_at"], name="ledger_key_time"),
            # settle_stale looks for old pending charges; they are few, so a partial index.
            models.Index(fields=["created_at"], name="ledger_pending_time", condition=Q(status="pending")),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=LEDGER_KINDS), name="ledger_kind_known"),
            models.CheckConstraint(condition=Q(status__in=LEDGER_STATUSES), name="ledger_status_known"),
            models.CheckConstraint(condition=Q(balance_after__gte=0), name="ledger_balance_non_negative"),
        ]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.kind} {self.amount:+d} ({self.status})"


class IdempotentRequest(models.Model):
    """A metered request sent with an Idempotency-Key: charged once, answered again from here.

    The unique constraint is what makes two simultaneous first attempts safe: the
    second one's charge is rolled back with it. A record whose charge was refunded
    is deleted, so a retry after a failure runs again; records past the retention
    are deleted by the ledger sweeper.
    """

    key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="idempotent_requests")
    idempotency_key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64, help_text="SHA-256 of the operation and the body.")
    entry = models.OneToOneField(LedgerEntry, on_delete=models.CASCADE, related_name="idempotent_request")
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_headers = models.JSONField(default=dict, blank=True)
    response_body = models.BinaryField(null=True, blank=True)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "idempotency_key"], name="idempotency_key_once")]
