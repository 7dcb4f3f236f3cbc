"""Composite indexes, for strict mode: which compound queries production would refuse.

Production serves equality-only queries by merging single-field indexes, and a single range or
order field (or one array-contains) from the automatic single-field indexes; anything else needs
a composite index, and a query without one fails with FAILED_PRECONDITION "The query requires an
index. You can create it here: <console link>"
(https://firebase.google.com/docs/firestore/query-data/index-overview,
https://cloud.google.com/firestore/docs/query-data/indexing). A composite index serves a query
when it lists the query's equality (and array-contains) fields first, in any order, then its
ordered fields (explicit orders, then inequality fields) in order and direction; the implicit
``__name__`` tiebreak needs nothing. Index merging (two composite indexes serving one query
together) is not modelled: the emulator may refuse a query production would serve, never
the reverse.

Definitions come from a ``firestore.indexes.json`` as the Firebase CLI writes it
(https://firebase.google.com/docs/reference/firestore/indexes) or from Python declarations
(``package.module:NAME``: objects with ``collection`` and ``fields`` of ``path`` / ``order``).
"""

from __future__ import annotations

import base64
import importlib
import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.cloud.firestore_admin_v1.types import index as admin_index
from google.cloud.firestore_v1.types import query as query_types

from emulators.firestore.errors import FailedPrecondition, InvalidArgument
from emulators.firestore.names import DatabaseKey
from emulators.firestore.values import NAME_PATH, FieldPath, format_field_path, parse_field_path

ASCENDING = "ASCENDING"
DESCENDING = "DESCENDING"
CONTAINS = "CONTAINS"
COLLECTION = "COLLECTION"
COLLECTION_GROUP = "COLLECTION_GROUP"
_MODES = (ASCENDING, DESCENDING, CONTAINS)
_SCOPES = (COLLECTION, COLLECTION_GROUP)
# Production refuses a filter whose disjunctive normal form has more than 30 terms
# (https://firebase.google.com/docs/firestore/query-data/queries#limits_on_or_queries).
_MAX_DISJUNCTS = 30

_StructuredQuery = query_types.StructuredQuery.pb()
_FieldOp = _StructuredQuery.FieldFilter.Operator
_UnaryOp = _StructuredQuery.UnaryFilter.Operator
_EQUALITY = {_FieldOp.EQUAL, _FieldOp.IN}
_CONTAINS = {_FieldOp.ARRAY_CONTAINS, _FieldOp.ARRAY_CONTAINS_ANY}
_AdminIndex = admin_index.Index.pb()


class IndexDefinitionError(ValueError):
    """An index definition file or declaration is malformed."""


@dataclass(frozen=True)
class IndexField:
    path: FieldPath
    mode: str  # ASCENDING, DESCENDING or CONTAINS


@dataclass(frozen=True)
class CompositeIndex:
    collection_group: str
    scope: str
    fields: tuple[IndexField, ...]

    @classmethod
    def of(
        cls, collection_group: Any, fields: Iterable[tuple[Any, Any]], scope: Any = COLLECTION
    ) -> CompositeIndex:
        """From plain values: ``CompositeIndex.of("jobs", [("state", "ASCENDING"), ...])``."""
        if not isinstance(collection_group, str) or not collection_group:
            raise IndexDefinitionError("an index needs a collection group")
        if scope not in _SCOPES:
            raise IndexDefinitionError(f"index scope {scope!r} is not one of {_SCOPES}")
        parsed = []
        for path, mode in fields:
            if not isinstance(path, str):
                raise IndexDefinitionError(f"index field path {path!r} is not a string")
            if mode not in _MODES:
                raise IndexDefinitionError(f"index field {path!r}: mode {mode!r} not in {_MODES}")
            try:
                parsed.append(IndexField(parse_field_path(path), mode))
            except InvalidArgument as exc:
                raise IndexDefinitionError(f"index field {path!r}: {exc.message}") from exc
        # A trailing __name__ only restates the implicit tiebreak.
        while parsed and parsed[-1].path == NAME_PATH:
            parsed.pop()
        if not parsed:
            raise IndexDefinitionError(f"index on {collection_group!r} has no fields")
        return cls(collection_group, scope, tuple(parsed))


@dataclass(frozen=True)
class Needs:
    """What one disjunct of a query asks of the indexes."""

    collection_group: str
    scope: str
    equality: frozenset[FieldPath]
    contains: FieldPath | None
    ordered: tuple[tuple[FieldPath, bool], ...]  # (path, descending), without __name__

    def needs_composite(self) -> bool:
        if not self.ordered and self.contains is None:
            return False  # equality only: single-field indexes merge
        if not self.equality and self.contains is None:
            return len(self.ordered) > 1
        return bool(self.equality) or bool(self.ordered)

    def served_by(self, index: CompositeIndex) -> bool:
        if index.collection_group != self.collection_group or index.scope != self.scope:
            return False
        head_size = len(self.equality) + (self.contains is not None)
        head, tail = index.fields[:head_size], index.fields[head_size:]
        if len(tail) != len(self.ordered):
            return False
        wanted_head = {(p, False) for p in self.equality}
        if self.contains is not None:
            wanted_head.add((self.contains, True))
        if {(f.path, f.mode == CONTAINS) for f in head} != wanted_head:
            return False
        return all(
            f.path == path and f.mode == (DESCENDING if desc else ASCENDING)
            for f, (path, desc) in zip(tail, self.ordered, strict=True)
        )


Exemption = tuple[str, FieldPath]  # (collection group, field): single-field indexes disabled


@dataclass(frozen=True)
class Definitions:
    """What a definitions file or module declares: composite indexes, and the fields whose
    automatic single-field indexes are switched off (iterating gives the indexes)."""

    indexes: tuple[CompositeIndex, ...] = ()
    exemptions: frozenset[Exemption] = frozenset()

    def __iter__(self) -> Iterator[CompositeIndex]:
        return iter(self.indexes)


class IndexSet:
    """Indexes every database has (from the definitions loaded at start), unless a project was
    given definitions of its own (`use`, as one deployment differs from another), plus the
    ones added to one (project, database) at run time, as CreateIndex would."""

    def __init__(self, indexes: Iterable[CompositeIndex] = ()) -> None:
        base = indexes if isinstance(indexes, Definitions) else Definitions(tuple(indexes))
        self._everywhere = Definitions(tuple(base), base.exemptions)
        self._lock = threading.Lock()
        self._added: dict[DatabaseKey, list[CompositeIndex]] = {}
        self._projects: dict[str, Definitions] = {}

    def add(self, database: DatabaseKey, index: CompositeIndex) -> None:
        with self._lock:
            self._added.setdefault(database, []).append(index)

    def use(self, project: str, definitions: Definitions) -> None:
        """Serve `project`'s databases from `definitions` instead of the start-up ones."""
        with self._lock:
            self._projects[project] = definitions

    def drop(self, project: str | None = None) -> None:
        """Forget run-time indexes and definitions (of one project), as a reset forgets its
        documents."""
        with self._lock:
            for key in list(self._added):
                if project is None or key[0] == project:
                    del self._added[key]
            for name in list(self._projects):
                if project is None or name == project:
                    del self._projects[name]

    def definitions(self, database: DatabaseKey) -> Definitions:
        """What serves `database`: its project's definitions with the run-time additions."""
        with self._lock:
            base = self._projects.get(database[0], self._everywhere)
            return Definitions((*base.indexes, *self._added.get(database, [])), base.exemptions)

    def exemptions(self, database: DatabaseKey) -> frozenset[Exemption]:
        """The fields of `database` without single-field indexes."""
        with self._lock:
            return self._projects.get(database[0], self._everywhere).exemptions

    def of(self, database: DatabaseKey) -> list[CompositeIndex]:
        return list(self.definitions(database).indexes)

    def check(
        self, database: DatabaseKey, parent: str, pb: Any, aggregated: Iterable[FieldPath] = ()
    ) -> None:
        """Raise FAILED_PRECONDITION, as production does, when no index serves the query
        ``pb`` (a StructuredQuery) run under ``parent``."""
        served = self.definitions(database)
        for needs in requirements(pb, aggregated):
            if not needs.needs_composite():
                _check_single_field(needs, served.exemptions)
            elif not any(needs.served_by(i) for i in served.indexes):
                raise FailedPrecondition(
                    "The query requires an index. You can create it here: "
                    + create_link(database, needs)
                )


def _check_single_field(needs: Needs, exempt: frozenset[Exemption]) -> None:
    """A query single-field indexes serve fails when one of its fields has them switched off
    (an exemption covers the field and, for a map, everything inside it)."""
    paths = [*needs.equality, *[p for p, _ in needs.ordered]]
    if needs.contains is not None:
        paths.append(needs.contains)
    for path in paths:
        if is_exempt(needs.collection_group, path, exempt):
            raise FailedPrecondition(
                f"The query requires an index: the single-field indexes of "
                f"{format_field_path(path)} in collection group "
                f"{needs.collection_group} are disabled by an exemption."
            )


def is_exempt(collection_group: str, path: FieldPath, exempt: frozenset[Exemption]) -> bool:
    """Whether an exemption switched off `path`'s single-field indexes (its own, or a map's
    it lies in)."""
    return any((collection_group, path[:depth]) in exempt for depth in range(1, len(path) + 1))


def requirements(pb: Any, aggregated: Iterable[FieldPath] = ()) -> list[Needs]:
    """One :class:`Needs` per disjunct of the query's filter (in its normal form)."""
    selector = pb.from_[0]
    scope = COLLECTION_GROUP if selector.all_descendants else COLLECTION
    explicit: list[tuple[FieldPath, bool]] = []
    for order in pb.order_by:
        explicit.append((parse_field_path(order.field.field_path), order.direction == _DESCENDING))
    last_desc = explicit[-1][1] if explicit else False
    disjuncts = _disjuncts(pb.where) if pb.HasField("where") else [[]]
    out = []
    for conjuncts in disjuncts:
        equality, contains, inequality = _classify(conjuncts)
        ordered = list(explicit)
        seen = {path for path, _ in ordered}
        for path in [*sorted(inequality), *aggregated]:
            if path not in seen:
                seen.add(path)
                ordered.append((path, last_desc))
        # An order on an equality field is kept (stricter than dropping it, and what the
        # project's own check in services/jobs/schema.py assumes).
        kept = tuple((p, d) for p, d in ordered if p != NAME_PATH)
        out.append(Needs(selector.collection_id, scope, frozenset(equality), contains, kept))
    return out


_DESCENDING = _StructuredQuery.Direction.DESCENDING


def _disjuncts(pb: Any) -> list[list[Any]]:
    """The filter as OR of ANDs of field/unary filters."""
    which = pb.WhichOneof("filter_type")
    if which != "composite_filter":
        return [[pb]]
    parts = [_disjuncts(f) for f in pb.composite_filter.filters]
    if pb.composite_filter.op == _StructuredQuery.CompositeFilter.Operator.OR:
        result = [d for part in parts for d in part]
    else:
        result = [[]]
        for part in parts:
            result = [a + b for a in result for b in part]
            if len(result) > _MAX_DISJUNCTS:
                break
    if len(result) > _MAX_DISJUNCTS:
        raise InvalidArgument(
            f"The query's filter has more than {_MAX_DISJUNCTS} disjunctions in normal form."
        )
    return result


def _classify(conjuncts: list[Any]) -> tuple[set[FieldPath], FieldPath | None, set[FieldPath]]:
    equality: set[FieldPath] = set()
    inequality: set[FieldPath] = set()
    contains: FieldPath | None = None
    for pb in conjuncts:
        which = pb.WhichOneof("filter_type")
        if which == "field_filter":
            path = parse_field_path(pb.field_filter.field.field_path)
            op = pb.field_filter.op
            if op in _EQUALITY:
                if path != NAME_PATH:
                    equality.add(path)
            elif op in _CONTAINS:
                contains = path
            else:
                inequality.add(path)
        elif which == "unary_filter":
            path = parse_field_path(pb.unary_filter.field.field_path)
            if pb.unary_filter.op in (_UnaryOp.IS_NULL, _UnaryOp.IS_NAN):
                equality.add(path)
            else:
                inequality.add(path)
    return equality, contains, inequality


def create_link(database: DatabaseKey, needs: Needs) -> str:
    """The console link production puts in its error: create_composite is the URL-safe
    base64 (unpadded) of the google.firestore.admin.v1.Index to create."""
    project, database_id = database
    index = _AdminIndex(
        name=(
            f"projects/{project}/databases/{database_id}/collectionGroups/"
            f"{needs.collection_group}/indexes/_"
        ),
        query_scope=_AdminIndex.QueryScope.Value(needs.scope),
    )
    for path in sorted(needs.equality):
        index.fields.add(field_path=format_field_path(path), order=1)
    if needs.contains is not None:
        index.fields.add(field_path=format_field_path(needs.contains), array_config=1)
    for path, desc in needs.ordered:
        index.fields.add(field_path=format_field_path(path), order=2 if desc else 1)
    last_desc = needs.ordered[-1][1] if needs.ordered else False
    index.fields.add(field_path="__name__", order=2 if last_desc else 1)
    encoded = base64.urlsafe_b64encode(index.SerializeToString()).decode().rstrip("=")
    return (
        f"https://console.firebase.google.com/v1/r/project/{project}/firestore/indexes"
        f"?create_composite={encoded}"
    )


# -- loading definitions -------------------------------------------------------------------


def load(spec: str) -> Definitions:
    """Definitions from a firestore.indexes.json path, a module (what its
    ``index_definitions()`` returns, (indexes, exemptions), or else its ``INDEXES`` and
    ``INDEX_EXEMPTIONS``), a ``module:NAME`` list of index declarations, or
    ``module?key=value&...``: the module's ``index_definitions(key=value, ...)``, for a
    project whose index set depends on its configuration (``services.jobs.schema?shards=4``)."""
    path = Path(spec)
    if path.suffix == ".json" or path.exists():
        return Definitions(tuple(from_json(path)), _exemptions_from_json(path))
    reference, _, query = spec.partition("?")
    module_name, sep, attribute = reference.partition(":")
    if not module_name or (sep and not attribute) or (query and sep):
        raise IndexDefinitionError(
            f"{spec!r} is neither a firestore.indexes.json file nor a module[:NAME] or "
            "module?key=value reference"
        )
    try:
        module = importlib.import_module(module_name)
        if query:
            declared, exempted = module.index_definitions(**_options(spec, query))
        elif not attribute and hasattr(module, "index_definitions"):
            declared, exempted = module.index_definitions()
        else:
            declared = getattr(module, attribute or "INDEXES")
            exempted = () if attribute else getattr(module, "INDEX_EXEMPTIONS", ())
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise IndexDefinitionError(f"cannot load index declarations {spec!r}: {exc}") from exc
    return Definitions(tuple(from_declarations(declared)), exemptions_from(exempted))


def _options(spec: str, query: str) -> dict[str, str]:
    options = {}
    for pair in query.split("&"):
        key, eq, value = pair.partition("=")
        if not key or not eq:
            raise IndexDefinitionError(f"{spec!r}: {pair!r} is not key=value")
        options[key] = value
    return options


def exemptions_from(declared: Iterable[Any]) -> frozenset[Exemption]:
    """Objects with ``collection`` and ``field``: services/jobs/schema.py's IndexExemption."""
    out = set()
    for item in declared:
        try:
            out.add((str(item.collection), parse_field_path(str(item.field))))
        except (AttributeError, InvalidArgument) as exc:
            raise IndexDefinitionError(f"index exemption {item!r}: {exc}") from exc
    return frozenset(out)


def _exemptions_from_json(path: Path) -> frozenset[Exemption]:
    """The fieldOverrides that switch every single-field index off (``"indexes": []``);
    overrides that keep some of them are not modelled."""
    overrides = json.loads(path.read_text()).get("fieldOverrides") or []
    out = set()
    for n, override in enumerate(overrides):
        if not isinstance(override, dict):
            raise IndexDefinitionError(f"{path}: fieldOverrides[{n}] is not an object")
        group, field = override.get("collectionGroup"), override.get("fieldPath")
        if not isinstance(group, str) or not isinstance(field, str):
            raise IndexDefinitionError(
                f"{path}: fieldOverrides[{n}] needs collectionGroup and fieldPath"
            )
        if override.get("indexes") == []:
            try:
                out.add((group, parse_field_path(field)))
            except InvalidArgument as exc:
                raise IndexDefinitionError(f"{path}: fieldOverrides[{n}]: {exc}") from exc
    return frozenset(out)


def from_json(path: Path) -> list[CompositeIndex]:
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        raise IndexDefinitionError(f"{path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise IndexDefinitionError(f"{path}: not JSON ({exc})") from exc
    entries = document.get("indexes") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise IndexDefinitionError(f"{path}: needs an 'indexes' list")
    out = []
    for n, entry in enumerate(entries):
        try:
            out.append(from_entry(entry))
        except IndexDefinitionError as exc:
            raise IndexDefinitionError(f"{path}: indexes[{n}]: {exc}") from exc
    return out


def from_entry(entry: Any) -> CompositeIndex:
    """One entry of a firestore.indexes.json "indexes" list."""
    if not isinstance(entry, dict) or not isinstance(entry.get("fields"), list):
        raise IndexDefinitionError("an index needs a 'fields' list")
    fields = []
    for field in entry["fields"]:
        if not isinstance(field, dict) or not isinstance(field.get("fieldPath"), str):
            raise IndexDefinitionError("every index field needs a fieldPath")
        fields.append((field["fieldPath"], field.get("order") or field.get("arrayConfig")))
    return CompositeIndex.of(
        entry.get("collectionGroup"), fields, entry.get("queryScope", COLLECTION)
    )


def from_declarations(declared: Iterable[Any]) -> list[CompositeIndex]:
    """Objects with ``collection`` and ``fields`` (each ``path`` and ``order``), and
    optionally ``query_scope``: the shape of services/jobs/schema.py's CompositeIndex."""
    out = []
    for item in declared:
        try:
            fields = [(f.path, f.order) for f in item.fields]
            scope = getattr(item, "query_scope", COLLECTION)
            out.append(CompositeIndex.of(item.collection, fields, scope))
        except AttributeError as exc:
            raise IndexDefinitionError(f"index declaration {item!r}: {exc}") from exc
    return out
