"""The Firestore database the store talks to, through the public GAPIC client only.

`google.cloud.firestore_v1.services.firestore.FirestoreClient` is the generated client of the
Firestore RPC API (https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1):
every method takes `retry=` and `timeout=`, and its requests and answers are the
`google.cloud.firestore_v1.types` messages. The high-level `firestore.Client` wraps the same
client but reaches it through private attributes; this module builds its own the way the
high-level client does (same endpoint, channel options and metadata), from public arguments.
The gateway sends the unary RPCs on its own gRPC callables over this client's transport
channel (`gateway.py` says why), and the streaming ones through the client's methods.

With `FIRESTORE_EMULATOR_HOST` set the channel is an insecure one to that host and every call
carries `authorization: Bearer owner`, as Google's clients do for the emulator
(https://cloud.google.com/firestore/docs/emulator#connect_to_the_emulator); otherwise it is a
secure channel with the application's default credentials
(https://cloud.google.com/docs/authentication/application-default-credentials).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import grpc
from google.auth.credentials import Credentials
from google.cloud.firestore_v1.services.firestore import FirestoreClient
from google.cloud.firestore_v1.services.firestore.transports import FirestoreGrpcTransport

EMULATOR_HOST = "FIRESTORE_EMULATOR_HOST"
DEFAULT_DATABASE = "(default)"
# Firestore's default endpoint, and what the high-level client asks of its channel: no size
# limit on a message (a page of documents), a keepalive ping every 30 s.
ENDPOINT = "firestore.googleapis.com"
_SIZE_OPTIONS = (("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1))
_CHANNEL_OPTIONS = (("grpc.keepalive_time_ms", 30000), *_SIZE_OPTIONS)
# Scopes of Firestore's data API (the high-level client asks for both).
SCOPES = (
    "https://www.googleapis.com/auth/cloud-platform",
    "https://www.googleapis.com/auth/datastore",
)


@dataclass(frozen=True)
class Database:
    """One Firestore database: its GAPIC client, its resource name, the metadata every call
    carries."""

    api: FirestoreClient
    project: str
    database: str = DEFAULT_DATABASE
    metadata: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.project or "/" in self.project:
            raise ValueError(f"project {self.project!r} is not a project ID")
        if not self.database or "/" in self.database:
            raise ValueError(f"database {self.database!r} is not a database ID")

    @property
    def path(self) -> str:
        """`projects/{project}/databases/{database}`: what BeginTransaction, Commit,
        Rollback and BatchWrite name."""
        return database_path(self.project, self.database)

    @property
    def documents(self) -> str:
        """The parent of every top-level collection (what RunQuery names)."""
        return f"{self.path}/documents"

    def name(self, collection: str, document_id: str) -> str:
        """The resource name of a document of a top-level collection."""
        return f"{self.documents}/{collection}/{document_id}"

    def relative(self, name: str) -> str:
        """`collection/id` for a document's resource name in this database."""
        prefix = self.documents + "/"
        if not name.startswith(prefix):
            raise ValueError(f"{name!r} is not a document of {self.path}")
        return name[len(prefix) :]


def database_path(project: str, database: str | None = None) -> str:
    """The resource name of a database (the default one unless named)."""
    return f"projects/{project}/databases/{database or DEFAULT_DATABASE}"


def connect(
    project: str,
    database: str | None = None,
    *,
    credentials: Credentials | None = None,
    environ: Any = None,
) -> Database:
    """A `Database` with its own GAPIC client, to the emulator when `FIRESTORE_EMULATOR_HOST`
    is set in `environ` (the process environment by default)."""
    environ = os.environ if environ is None else environ
    database = database or DEFAULT_DATABASE
    # Routing: Firestore takes the database from this header for a named database
    # (the high-level client sends it on every call too).
    metadata: list[tuple[str, str]] = [
        ("google-cloud-resource-prefix", database_path(project, database))
    ]
    host = environ.get(EMULATOR_HOST)
    if host:
        channel = grpc.insecure_channel(host, options=list(_SIZE_OPTIONS))
        transport = FirestoreGrpcTransport(host=host, channel=channel)
        metadata.append(("authorization", "Bearer owner"))
    else:
        channel = FirestoreGrpcTransport.create_channel(
            ENDPOINT, credentials=credentials, scopes=SCOPES, options=list(_CHANNEL_OPTIONS)
        )
        transport = FirestoreGrpcTransport(host=ENDPOINT, channel=channel)
    return Database(FirestoreClient(transport=transport), project, database, tuple(metadata))


def for_client(client: Any, database: str | None = None) -> Database:
    """The `Database` of a high-level `firestore.Client`: its public `project`, and
    `database` (the default database unless named; the client keeps its own name private).
    Credentials come from the environment as the high-level client's own default does."""
    return connect(str(client.project), database)
