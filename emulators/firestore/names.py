"""Resource names: projects/{p}/databases/{d}/documents/{collection}/{id}/..."""

from __future__ import annotations

import re
from dataclasses import dataclass

from emulators.firestore.errors import InvalidArgument

DatabaseKey = tuple[str, str]
_RESERVED_ID = re.compile(r"^__.*__$")
_MAX_NAME_BYTES = 6 * 1024


@dataclass(frozen=True)
class DocumentName:
    """A parsed document name; ``path`` is the part after ``/documents/``."""

    database: DatabaseKey
    path: tuple[str, ...]

    @property
    def full(self) -> str:
        return documents_root(self.database) + "/" + "/".join(self.path)

    @property
    def collection_id(self) -> str:
        return self.path[-2]

    @property
    def parent(self) -> str:
        """The name of the parent (the ``documents`` root or a document)."""
        if len(self.path) == 2:
            return documents_root(self.database)
        return documents_root(self.database) + "/" + "/".join(self.path[:-2])


def documents_root(database: DatabaseKey) -> str:
    return f"projects/{database[0]}/databases/{database[1]}/documents"


def parse_database(name: str) -> DatabaseKey:
    parts = name.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != "databases":
        raise InvalidArgument(f"Invalid database name: {name!r}.")
    if not parts[1] or not parts[3]:
        raise InvalidArgument(f"Invalid database name: {name!r}.")
    return parts[1], parts[3]


def _split_documents(name: str) -> tuple[DatabaseKey, list[str]]:
    parts = name.split("/")
    if len(parts) < 5 or parts[4] != "documents":
        raise InvalidArgument(f"Invalid resource name: {name!r}.")
    database = parse_database("/".join(parts[:4]))
    rest = parts[5:]
    for seg in rest:
        if not seg or seg in (".", "..") or _RESERVED_ID.match(seg):
            raise InvalidArgument(f"Invalid resource name: {name!r}; bad segment {seg!r}.")
    if len(name.encode()) > _MAX_NAME_BYTES:
        raise InvalidArgument("Resource name is too long.")
    return database, rest


def parse_document(name: str) -> DocumentName:
    database, rest = _split_documents(name)
    if not rest or len(rest) % 2:
        raise InvalidArgument(
            f"Invalid document name: {name!r}; it must have an even number of segments."
        )
    return DocumentName(database, tuple(rest))


def parse_parent(name: str) -> tuple[DatabaseKey, tuple[str, ...]]:
    """A query or listing parent: the documents root or a document name."""
    database, rest = _split_documents(name)
    if len(rest) % 2:
        raise InvalidArgument(f"Invalid parent: {name!r}; it must be the root or a document.")
    return database, tuple(rest)
