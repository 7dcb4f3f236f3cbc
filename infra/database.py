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
from infra.scope import Scope
from services.jobs import schema

# The services and the operator CLI use the default database; an adopted database must be it.
DATABASE_NAME = "(default)"

# Custom timeouts, so a slow operation fails the `up` with a clear timeout instead of hanging,
# and a normal one is not cut short. Expected: a database is created in about a minute; an
# index on an empty collection builds in a few minutes ("Index builds take a few minutes at
# minimum", https://cloud.google.com/firestore/docs/query-data/indexing), and a field's TTL or
# exemption change likewise. The index and field operations run one at a time (below), so a
# first `up` spends on the order of (indexes + fields) x 1-3 min on them (inferred, not
# measured: 17 indexes and 41 fields at shards = 1: about 1-3 hours in the worst case), which
# is why they start first.
# pulumi-gcp's own defaults are 20 min per operation.
DATABASE_TIMEOUTS = pulumi.CustomTimeouts(create="20m", update="20m", delete="20m")
INDEX_TIMEOUTS = pulumi.CustomTimeouts(create="30m", update="30m", delete="30m")


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


def create_database(config: StackConfig, scope: Scope, opts: pulumi.ResourceOptions) -> Database:
    """The database (or the adopted one), then every schema index and field override on it."""
    database: firestore.Database | None = None
    children = opts
    if config.create_database:
        database = firestore.Database(
            scope.name("firestore"),
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
                opts,
                pulumi.ResourceOptions(
                    protect=config.deletion_protection, custom_timeouts=DATABASE_TIMEOUTS
                ),
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
        indexes.append(_index(config, scope, index, in_turn()))
        previous = [indexes[-1]]
    fields: list[firestore.Field] = []
    for override in field_overrides(exemptions=schema.exemptions(config.shards)):
        fields.append(_field(config, scope, override, in_turn()))
        previous = [fields[-1]]
    return Database(
        DATABASE_NAME, database, indexes, fields, _backup_schedule(config, scope, in_turn())
    )


def _index(
    config: StackConfig, scope: Scope, index: schema.CompositeIndex, opts: pulumi.ResourceOptions
) -> firestore.Index:
    return firestore.Index(
        scope.name(index_resource_name(index)),
        project=config.project,
        database=DATABASE_NAME,
        collection=index.collection,
        query_scope="COLLECTION",
        fields=[
            firestore.IndexFieldArgs(field_path=field.path, order=field.order)
            for field in index.fields
        ],
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(custom_timeouts=INDEX_TIMEOUTS)
        ),
    )


def _field(
    config: StackConfig, scope: Scope, override: FieldOverride, opts: pulumi.ResourceOptions
) -> firestore.Field:
    return firestore.Field(
        scope.name(field_resource_name(override)),
        project=config.project,
        database=DATABASE_NAME,
        collection=override.collection,
        field=override.field,
        ttl_config=firestore.FieldTtlConfigArgs() if override.ttl else None,
        # An index config with no indexes switches off the field's automatic single-field
        # indexes (ascending, descending, array-contains).
        index_config=firestore.FieldIndexConfigArgs(indexes=[]),
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(custom_timeouts=INDEX_TIMEOUTS)
        ),
    )


def _backup_schedule(
    config: StackConfig, scope: Scope, opts: pulumi.ResourceOptions
) -> firestore.BackupSchedule | None:
    """A daily backup kept `backupRetentionDays` (at most 14 weeks), or none for 0.

    https://cloud.google.com/firestore/docs/backups; a backup restores into a new database
    (docs/deploy.md, "Restore Firestore").
    """
    if config.backup_retention_days == 0:
        return None
    return firestore.BackupSchedule(
        scope.name("firestore-daily-backup"),
        project=config.project,
        database=DATABASE_NAME,
        retention=f"{config.backup_retention_days * 86400}s",
        daily_recurrence=firestore.BackupScheduleDailyRecurrenceArgs(),
        opts=opts,
    )
