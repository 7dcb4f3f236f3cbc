"""The Firestore database, its composite indexes, TTL policies, index exemptions and backups.

services.jobs.schema is the one source of truth: whatever indexes, TTL fields and index
exemptions it declares for the stack's `shards` are created here, by iterating over them, never
by copying. Raising `shards` above 1 drops the unsharded indexes and exempts `due_at`; the
sharded indexes the new queries need exist at N = 1 already (schema.SHARDED_INDEXES says why).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_gcp import firestore

from infra.config import StackConfig
from services.jobs import schema

# The services and the operator CLI use the default database; an adopted database must be it.
DATABASE_NAME = "(default)"


@dataclass(frozen=True)
class Database:
    name: str
    database: firestore.Database | None  # None: adopted, not managed by this stack
    indexes: list[firestore.Index]
    fields: list[firestore.Field]  # one per FieldOverride: TTL policies and index exemptions
    backup_schedule: firestore.BackupSchedule | None  # None: backupRetentionDays = 0

    @property
    def ready(self) -> list[pulumi.Resource]:
        """What must exist before anything queries the database (the scheduler's first run)."""
        managed: list[pulumi.Resource] = [self.database] if self.database is not None else []
        return [*managed, *self.indexes, *self.fields]


@dataclass(frozen=True)
class FieldOverride:
    """One field's configuration: single-field indexing off, and a TTL policy when `ttl`.

    Firestore keeps one configuration per (collection group, field), so a field that is both a
    TTL field and an index exemption must be one firestore.Field resource: two resources for one
    field would overwrite each other's settings on every `pulumi up`.
    """

    collection: str
    field: str
    ttl: bool


def field_overrides(
    ttl_fields: tuple[schema.TtlField, ...] | None = None,
    exemptions: tuple[schema.IndexExemption, ...] | None = None,
) -> tuple[FieldOverride, ...]:
    """Every TTL field and every exemption (default: the schema's), merged by (collection, field).

    TTL fields come first, then exemptions, each in declaration order. A TTL field is exempt
    from indexing too: nothing queries it, and an indexed timestamp that grows with time caps a
    collection's write rate (a hotspot on the index's last range).
    """
    ttl_fields = schema.TTL_FIELDS if ttl_fields is None else ttl_fields
    exemptions = schema.INDEX_EXEMPTIONS if exemptions is None else exemptions
    ttl_keys = {(ttl.collection, ttl.field) for ttl in ttl_fields}
    keys = [(ttl.collection, ttl.field) for ttl in ttl_fields]
    keys += [(exempt.collection, exempt.field) for exempt in exemptions]
    unique = dict.fromkeys(keys)  # first occurrence wins the position, duplicates collapse
    return tuple(FieldOverride(c, f, ttl=(c, f) in ttl_keys) for c, f in unique)


def index_resource_name(index: schema.CompositeIndex) -> str:
    paths = "-".join(path.replace(".", "_") for path in index.field_paths)
    return f"index-{index.collection}-{paths}"


def field_resource_name(override: FieldOverride) -> str:
    # TTL fields keep the names they had before exemptions existed, so existing stacks update
    # them in place instead of replacing them.
    kind = "ttl" if override.ttl else "noindex"
    return f"{kind}-{override.collection}-{override.field.replace('.', '_')}"


def create_database(config: StackConfig, opts: pulumi.ResourceOptions) -> Database:
    """The database (or the adopted one), then every schema index and field override on it."""
    database: firestore.Database | None = None
    children = opts
    if config.create_database:
        database = firestore.Database(
            "firestore",
            project=config.project,
            name=DATABASE_NAME,
            location_id=config.database_location,
            type="FIRESTORE_NATIVE",
            delete_protection_state=(
                "DELETE_PROTECTION_ENABLED"
                if config.deletion_protection
                else "DELETE_PROTECTION_DISABLED"
            ),
            # A protected database is left in place by `pulumi destroy`, never deleted.
            deletion_policy="ABANDON" if config.deletion_protection else "DELETE",
            # PITR keeps 7 days of versions readable (and clonable into a new database);
            # https://cloud.google.com/firestore/docs/pitr
            point_in_time_recovery_enablement=(
                "POINT_IN_TIME_RECOVERY_ENABLED"
                if config.point_in_time_recovery
                else "POINT_IN_TIME_RECOVERY_DISABLED"
            ),
            opts=pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(protect=config.deletion_protection)
            ),
        )
        children = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[database]))
    # One index-configuration change at a time: Firestore answers 409 ("too much contention",
    # "underlying data changed") to concurrent index and field operations on one database
    # (firebase-tools serialises them for that reason, firebase/firebase-tools#1119), so each
    # index and field waits for the one before it.
    previous: list[pulumi.Resource] = []

    def in_turn() -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions.merge(children, pulumi.ResourceOptions(depends_on=previous))

    indexes: list[firestore.Index] = []
    for index in schema.composite_indexes(config.shards):
        indexes.append(_index(config, index, in_turn()))
        previous = [indexes[-1]]
    fields: list[firestore.Field] = []
    for override in field_overrides(exemptions=schema.exemptions(config.shards)):
        fields.append(_field(config, override, in_turn()))
        previous = [fields[-1]]
    return Database(DATABASE_NAME, database, indexes, fields, _backup_schedule(config, in_turn()))


def _index(
    config: StackConfig, index: schema.CompositeIndex, opts: pulumi.ResourceOptions
) -> firestore.Index:
    return firestore.Index(
        index_resource_name(index),
        project=config.project,
        database=DATABASE_NAME,
        collection=index.collection,
        query_scope="COLLECTION",
        fields=[
            firestore.IndexFieldArgs(field_path=field.path, order=field.order)
            for field in index.fields
        ],
        opts=opts,
    )


def _field(
    config: StackConfig, override: FieldOverride, opts: pulumi.ResourceOptions
) -> firestore.Field:
    return firestore.Field(
        field_resource_name(override),
        project=config.project,
        database=DATABASE_NAME,
        collection=override.collection,
        field=override.field,
        ttl_config=firestore.FieldTtlConfigArgs() if override.ttl else None,
        # An index config with no indexes switches off the field's automatic single-field
        # indexes (ascending, descending, array-contains).
        index_config=firestore.FieldIndexConfigArgs(indexes=[]),
        opts=opts,
    )


def _backup_schedule(
    config: StackConfig, opts: pulumi.ResourceOptions
) -> firestore.BackupSchedule | None:
    """A daily backup kept `backupRetentionDays` (at most 14 weeks), or none for 0.

    https://cloud.google.com/firestore/docs/backups; a backup restores into a new database
    (docs/deploy.md, "Restore Firestore").
    """
    if config.backup_retention_days == 0:
        return None
    return firestore.BackupSchedule(
        "firestore-daily-backup",
        project=config.project,
        database=DATABASE_NAME,
        retention=f"{config.backup_retention_days * 86400}s",
        daily_recurrence=firestore.BackupScheduleDailyRecurrenceArgs(),
        opts=opts,
    )
