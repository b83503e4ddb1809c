import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, cast

from django.db import models
from django.db.models import Q

from utils_app.errors import InvalidRequest

if TYPE_CHECKING:
    from keys.auth_cache import _Entry

TIERS = ("free", "augmented", "premium", "cool", "partner", "limited", "exclusive", "special")
TIER_CHOICES = [(tier, tier) for tier in TIERS]
# Whom each tier is meant for, as the landing page explains it. What a tier may call is each model's
# access list in the catalog, not this text: the page counts that beside it.
TIER_DESCRIPTIONS = {
    "free": "The tier a new key gets, for anyone who was handed one.",
    "augmented": "A free key raised a step, for regular users; the demo key of make run is one.",
    "premium": "Paying customers.",
    "cool": "Community members the operator singles out.",
    "partner": "Keys of partner services and integrations.",
    "limited": "A key on a short leash: shared, public or under watch.",
    "exclusive": "Invited keys.",
    "special": "The operator's own keys and one-off arrangements.",
}

# The rules of a key's configuration live here and nowhere else: the ranges below, the tiers
# above, credits <= maxCredits and the owner columns' lengths (ApiKey.check_rules). Every door
# that configures a key (admin API, staff forms, issue_key command) goes through keys.services,
# which asks check_rules; the admin API's fields, the forms' fields and the database constraints
# in ApiKey.Meta read their bounds from the same statements. A new key's defaults are its
# fields' own (ApiKey.new).

# (least, most) of each number of a key; most None: no ceiling but the column's own (a bigint).
# The last two may also be empty (None): no budget, no token limit (OPTIONAL_NUMBERS).
RANGES = {
    "credits": (0, None),
    "max_credits": (0, None),
    "rpm": (1, 1000),
    "rph": (1, 10000),
    "max_concurrent": (1, 1000),
    "budget_credits": (1, None),
    "tpm": (1, 1_000_000_000),
}
OPTIONAL_NUMBERS = ("budget_credits", "tpm")
BIGINT_MAX = models.BigIntegerField.MAX_BIGINT
# A budget's periods: UTC calendar days, weeks from Monday, months. A budget has both its credits and
# its period, or neither.
BUDGET_PERIODS = ("day", "week", "month")

SECRET_PREFIX = "sk-"
DISPLAY_PREFIX_LENGTH = 10  # "sk-" plus 7 characters: enough to tell keys apart, useless to an attacker


def bounds(field: str) -> tuple[int, int]:
    """(least, most) of one of a key's numbers, the column's limit standing in for "no ceiling"."""
    least, most = RANGES[field]
    return least, BIGINT_MAX if most is None else most


def _in_range(field: str) -> Q:
    least, most = RANGES[field]
    rule = Q(**{f"{field}__gte": least}) if most is None else Q(**{f"{field}__gte": least, f"{field}__lte": most})
    return Q(**{f"{field}__isnull": True}) | rule if field in OPTIONAL_NUMBERS else rule


def budget_bounds(period: str, now: datetime) -> tuple[datetime, datetime]:
    """(start, end) of the UTC calendar ``period`` (one of BUDGET_PERIODS) that ``now`` falls in.

    The charge statement opens a new period by itself when the stored start is older than this start,
    so these bounds are all a budget needs: no job resets it.
    """
    day = now.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day, day + timedelta(days=1)
    if period == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    if period == "month":
        start = day.replace(day=1)
        return start, (start + timedelta(days=32)).replace(day=1)
    raise ValueError(f"unknown budget period {period!r}")


@dataclass(frozen=True)
class BudgetState:
    """A key's budget in one period: what it may spend, has spent and has left, and when the period ends."""

    credits: int
    period: str
    spent: int
    left: int
    start: datetime
    end: datetime


class KeyRuleError(InvalidRequest):
    """A key configuration that breaks one of the rules: ``field`` is the ApiKey field at fault.

    It is a 400 wherever it surfaces. The admin API names the member it read into ``field``
    (keys.serializers.naming_rule_errors), a staff form puts the message on its field of that
    name, a command prints the message.
    """

    def __init__(self, field: str, message: str):
        super().__init__(message, code="invalid_value")
        self.field = field


def generate_secret() -> str:
    # 32 random bytes give 43 url-safe characters, above the 32 the contract asks for.
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def digest_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


# The members of a key's owner object (the SPEC's names) and the columns that hold them.
OWNER_FIELDS = {
    "platform_id": "owner_platform_id",
    "platform_username": "owner_platform_username",
    "platform_img": "owner_platform_img",
    "category": "owner_category",
}
# What configuring a key may change (the admin API's update, the staff edit page); the rest
# of a key is set when it is issued or by the service itself.
CONFIG_FIELDS = ("tier", "credits", "max_credits", "rpm", "rph", "max_concurrent", *OWNER_FIELDS.values(),
                 "budget_credits", "budget_period", "tpm")


class ApiKeyQuerySet(models.QuerySet):
    def active(self):
        return self.filter(is_active=True)

    def by_secret(self, secret: str):
        return self.filter(digest=digest_secret(secret))


class ApiKey(models.Model):
    """An API key. The secret itself is never stored: only its SHA-256 digest."""

    digest = models.CharField(max_length=64, editable=False)
    prefix = models.CharField(max_length=16, editable=False, db_index=True,
                              help_text="The first characters of the secret, for recognising a key.")
    name = models.CharField(max_length=120, blank=True, help_text="A label for staff.")
    tier = models.CharField(max_length=16, choices=TIER_CHOICES, default="free")
    credits = models.BigIntegerField(default=0)
    # The verbose names are the SPEC's spelling: the rules' messages and the staff forms use them.
    max_credits = models.BigIntegerField("maxCredits", default=0)
    rpm = models.PositiveIntegerField(default=60)
    rph = models.PositiveIntegerField(default=1000)
    max_concurrent = models.PositiveIntegerField(
        "maxConcurrent", default=16, help_text="Requests of this key in flight at once (streams count until they end).")
    # Charges of this key still pending (LedgerEntry rows with status 'pending'). Kept on the
    # row so the charge can check maxConcurrent under the row lock it already takes;
    # reconcile checks it against the ledger.
    in_flight = models.PositiveIntegerField(default=0, editable=False)
    owner_platform_id = models.CharField(max_length=64, blank=True)
    owner_platform_username = models.CharField(max_length=120, blank=True)
    owner_platform_img = models.CharField("owner platform image", max_length=500, blank=True)
    owner_category = models.CharField(max_length=120, blank=True)
    is_admin = models.BooleanField(default=False)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Section 12 of the contract: the most the key may be charged per UTC calendar period (holds included),
    # and its tokens per minute. budget_spent counts what was charged since budget_period_start; the charge
    # statement opens a new period by itself when the current one has ended.
    budget_credits = models.BigIntegerField(null=True, blank=True, help_text="Credits the key may be charged per "
                                                                             "budget period (empty: no budget).")
    budget_period = models.CharField(max_length=8, blank=True, default="",
                                     choices=[("", "none"), *((period, period) for period in BUDGET_PERIODS)])
    budget_spent = models.BigIntegerField(default=0, db_default=0, editable=False)
    budget_period_start = models.DateTimeField(null=True, blank=True, editable=False)
    tpm = models.PositiveIntegerField(null=True, blank=True,
                                      help_text="Tokens per minute, input plus output (empty: no limit).")
    # The tokens settled in the key's current minute (tpm_minute: minutes since the epoch), written by the
    # settlement statement and read by the charge statement, so the limit holds across workers and hosts.
    tpm_minute = models.BigIntegerField(default=0, db_default=0, editable=False)
    tpm_used = models.BigIntegerField(default=0, db_default=0, editable=False)

    objects = ApiKeyQuerySet.as_manager()
    # Not stored: the auth cache's entry the instance was built from (keys.auth_cache), None once
    # the row is known current.
    cached_row: "_Entry | None"

    class Meta:
        verbose_name = "API key"
        constraints = [
            # A key is found by its digest, only ever by equality: a unique constraint's one index, without the
            # pattern-matching copy Django adds beside a unique=True text column on PostgreSQL.
            models.UniqueConstraint(fields=["digest"], name="apikey_digest_unique"),
            # The rules of check_rules, held by the database too: the backstop for the conditional
            # UPDATE in gateway.metering and for any write that bypasses keys.services.
            models.CheckConstraint(condition=Q(tier__in=TIERS), name="apikey_tier_known"),
            models.CheckConstraint(condition=_in_range("credits"), name="apikey_credits_non_negative"),
            models.CheckConstraint(condition=_in_range("max_credits"), name="apikey_max_credits_non_negative"),
            models.CheckConstraint(condition=_in_range("rpm"), name="apikey_rpm_range"),
            models.CheckConstraint(condition=_in_range("rph"), name="apikey_rph_range"),
            models.CheckConstraint(condition=_in_range("max_concurrent"), name="apikey_max_concurrent_range"),
            models.CheckConstraint(condition=Q(credits__lte=models.F("max_credits")),
                                   name="apikey_credits_within_max"),
            models.CheckConstraint(condition=_in_range("budget_credits"), name="apikey_budget_credits_range"),
            models.CheckConstraint(condition=_in_range("tpm"), name="apikey_tpm_range"),
            models.CheckConstraint(condition=Q(budget_credits__isnull=True, budget_period="")
                                   | Q(budget_credits__isnull=False, budget_period__in=BUDGET_PERIODS),
                                   name="apikey_budget_whole"),
        ]

    @classmethod
    def new(cls, **fields) -> "ApiKey":
        """An unsaved key that keeps the rules (KeyRuleError otherwise).

        Fields left out or None take their defaults, and maxCredits defaults to the key's
        credits. ``owner`` may be given as the owner object instead of its columns.
        """
        key = cls(**{name: value for name, value in fields.items() if value is not None})
        if fields.get("max_credits") is None:
            key.max_credits = key.credits
        key.check_rules()
        return key

    def check_rules(self) -> None:
        """Raise KeyRuleError for the first rule this configuration breaks."""
        if self.tier not in TIERS:
            raise KeyRuleError("tier", f"tier must be one of: {', '.join(TIERS)}.")
        for field, (least, most) in RANGES.items():
            value, name = getattr(self, field), column(field).verbose_name
            if value is None and field in OPTIONAL_NUMBERS:
                continue
            if most is not None and not least <= value <= most:
                raise KeyRuleError(field, f"{name} must be between {least} and {most}.")
            if value < least:
                raise KeyRuleError(field, f"{name} must be {least} or more.")
            if value > BIGINT_MAX:  # no ceiling but the column's
                raise KeyRuleError(field, f"{name} must be at most {BIGINT_MAX}.")
        if self.credits > self.max_credits:
            raise KeyRuleError("credits", f"credits ({self.credits}) may not exceed maxCredits ({self.max_credits}).")
        if self.budget_period not in ("", *BUDGET_PERIODS):
            raise KeyRuleError("budget_period", f"budget period must be one of: {', '.join(BUDGET_PERIODS)}.")
        if self.budget_credits is not None and not self.budget_period:
            raise KeyRuleError("budget_period", "a budget needs its period: day, week or month.")
        if self.budget_credits is None and self.budget_period:
            raise KeyRuleError("budget_credits", "a budget period needs the budget's credits.")
        for field in ("name", *OWNER_FIELDS.values()):
            text = column(field)
            if text.max_length is not None and len(getattr(self, field)) > text.max_length:
                raise KeyRuleError(field, f"{text.verbose_name} may be at most {text.max_length} characters.")

    def __str__(self):
        return f"{self.prefix}… ({self.tier})"

    def budget_state(self, now: datetime) -> "BudgetState | None":
        """What the key has spent of its budget in the period ``now`` falls in, and what is left; None
        without a budget. budget_spent counts for the period that began at budget_period_start: a
        row whose period has ended has spent nothing of the current one (the next charge opens it)."""
        if self.budget_credits is None or self.budget_period not in BUDGET_PERIODS:
            return None
        start, end = budget_bounds(self.budget_period, now)
        current = self.budget_period_start is not None and self.budget_period_start >= start
        spent = self.budget_spent if current else 0
        return BudgetState(credits=self.budget_credits, period=self.budget_period, spent=spent,
                           left=max(0, self.budget_credits - spent), start=start, end=end)

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
        return {member: getattr(self, field) for member, field in OWNER_FIELDS.items()}

    @owner.setter
    def owner(self, members: dict) -> None:
        """Sets the members given and keeps the others; None clears a member."""
        for member, value in members.items():
            setattr(self, OWNER_FIELDS[member], "" if value is None else value)


def column(field: str) -> models.Field:
    """The ApiKey column named ``field`` (get_field also answers relations; every name asked here is a column)."""
    return cast(models.Field, ApiKey._meta.get_field(field))


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

    # No index of its own: ledger_key_time leads with it (one index write less per charge).
    key = models.ForeignKey(ApiKey, on_delete=models.PROTECT, related_name="ledger", db_index=False)
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
    # The catalog deployment that answered (or failed last): an id, not a key, for the same reason.
    deployment_id = models.PositiveIntegerField(null=True, blank=True)
    # Indexed only where set (ledger_refund_charge): a charge row, the one written per request, has none.
    charge = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="refunds",
                               db_index=False, help_text="For a refund: the charge it gives back.")
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    # A token-priced charge keeps the unit prices (credits per million tokens) it was charged at, so a later
    # price change never rewrites it; held is what the charge statement took, uncovered what the actual price
    # passed it by (never taken from the key).
    price_input = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)
    price_cached_input = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)
    price_output = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)
    request_fee = models.BigIntegerField(null=True, blank=True)
    held = models.BigIntegerField(null=True, blank=True)
    uncovered = models.BigIntegerField(default=0, db_default=0)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "ledger entry"
        verbose_name_plural = "ledger"
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["key", "-created_at"], name="ledger_key_time"),
            # No index names status (nor any column a settlement writes), so the settlement's UPDATE is
            # HOT on PostgreSQL: settle_stale finds pending charges above SweepMark by the primary key.
            models.Index(fields=["charge"], name="ledger_refund_charge", condition=Q(charge__isnull=False)),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=LEDGER_KINDS), name="ledger_kind_known"),
            models.CheckConstraint(condition=Q(status__in=LEDGER_STATUSES), name="ledger_status_known"),
            models.CheckConstraint(condition=Q(balance_after__gte=0), name="ledger_balance_non_negative"),
        ]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.kind} {self.amount:+d} ({self.status})"


class SweepMark(models.Model):
    """One row: the ledger id below which no charge is pending (gateway.sweeper.settle_stale).

    The sweeper reads the ledger from there by its primary key, so no index has to name the
    status a settlement changes. It only ever moves up, and never past a row created less than
    the sweep's age ago: an older charge has long committed, so none below the mark can appear."""

    ledger_id = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "ledger sweep mark"

    def __str__(self):
        return f"no pending charge at or below ledger id {self.ledger_id}"


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
