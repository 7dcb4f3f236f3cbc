"""The Firestore database, its composite indexes and TTL policies, from services.jobs.schema.

The schema module is the one source of truth: whatever indexes and TTL fields it declares are
created here, by iterating over them, never by copying.
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
    ttl_fields: list[firestore.Field]


def index_resource_name(index: schema.CompositeIndex) -> str:
    paths = "-".join(path.replace(".", "_") for path in index.field_paths)
    return f"index-{index.collection}-{paths}"


def create_database(config: StackConfig, opts: pulumi.ResourceOptions) -> Database:
    """The database (or the adopted one), then every schema index and TTL field on it."""
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
            opts=pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(protect=config.deletion_protection)
            ),
        )
        children = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[database]))
    indexes = [
        firestore.Index(
            index_resource_name(index),
            project=config.project,
            database=DATABASE_NAME,
            collection=index.collection,
            query_scope="COLLECTION",
            fields=[
                firestore.IndexFieldArgs(field_path=field.path, order=field.order)
                for field in index.fields
            ],
            opts=children,
        )
        for index in schema.INDEXES
    ]
    ttl_fields = [
        firestore.Field(
            f"ttl-{ttl.collection}-{ttl.field}",
            project=config.project,
            database=DATABASE_NAME,
            collection=ttl.collection,
            field=ttl.field,
            ttl_config=firestore.FieldTtlConfigArgs(),
            # An empty index config exempts the field from single-field indexing: nothing
            # queries it, and an indexed timestamp caps a collection's write rate (hotspot).
            index_config=firestore.FieldIndexConfigArgs(indexes=[]),
            opts=children,
        )
        for ttl in schema.TTL_FIELDS
    ]
    return Database(DATABASE_NAME, database, indexes, ttl_fields)
