"""Nothing in services/ reaches into a Google client library's private parts: no import of a
private module or name (`_helpers`, `bulk_batch`, ...), no private attribute of one of its
objects (`._pb`, `._firestore_api`, `._transport`, ...). Private parts change shape between
releases without notice; the public surface the store uses is pinned by
tests/unit/store/test_transactions.py instead.

Read from the syntax tree of every module: an attribute starting with one underscore, read
off anything but `self`/`cls`, is a library's unless services/ defines that name itself; the
names below are a library's wherever they appear. Each finding is listed with its place.
"""

from __future__ import annotations

import ast
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[2] / "services"
# Private names of google-cloud-* and proto-plus objects the code once used, flagged even
# where services/ happens to define the same name for itself.
LIBRARY_PRIVATE = frozenset(
    {
        "_pb",
        "_helpers",
        "_firestore_api",
        "_firestore_api_internal",
        "_database_string",
        "_rpc_metadata",
        "_document_path",
        "_write_pbs",
        "_add_write_pbs",
        "_document_references",
        "_get_stream_iterator",
        "_to_protobuf",
        "_begin",
        "_commit",
        "_rollback",
        "_clean_up",
        "_options_protobuf",
        "_transport",
        "_http",
        "_credentials",
        "_database",
        "_emulator_host",
        "_target",
    }
)
# Modules and names that are not part of a library's public surface though their names do
# not start with an underscore.
PRIVATE_MODULES = frozenset({"bulk_batch"})
PRIVATE_NAMES = frozenset({"BulkWriteBatch"})
LIBRARIES = ("google", "proto", "grpc")
# Private names read by their string (getattr).
GETATTR_NAMES = frozenset({"_pb", "_helpers", "_firestore_api", "_database_string", "_write_pbs"})
Finding = tuple[str, int, str]
CLIENT_CLASSES = ("firestore.", "firestore_v1.", "google.cloud.", "pubsub_v1.", "storage.")
# Known uses outside the Firestore work, each with why it is still here. An entry that is no
# longer found fails the test too, so this list only shrinks.
KNOWN: dict[tuple[str, str], str] = {
    (
        "worker/media.py",
        "client._http",
    ): "Cloud Storage's requests session, to stop it re-reading the environment on every "
    "request (a tenth of the storage call's CPU); the storage client has no public accessor",
}


def _trees(root: Path) -> dict[Path, ast.Module]:
    paths = sorted(root.rglob("*.py"))
    return {path: ast.parse(path.read_text(), str(path)) for path in paths}


def _own_names(trees: dict[Path, ast.Module]) -> set[str]:
    """Every underscore name services/ defines: functions, classes, attributes assigned on
    `self`/`cls`, class-level and module-level names, dataclass fields, parameters."""
    names: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
                if not isinstance(node, ast.ClassDef):
                    args = node.args
                    for arg in [*args.args, *args.kwonlyargs, *args.posonlyargs]:
                        names.add(arg.arg)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return {name for name in names if name.startswith("_")} - LIBRARY_PRIVATE


def _findings(trees: dict[Path, ast.Module], own: set[str], root: Path) -> list[Finding]:
    found: list[Finding] = []
    for path, tree in trees.items():
        where = str(path.relative_to(root))
        for node in ast.walk(tree):
            for what in _private_use(node, own):
                found.append((where, getattr(node, "lineno", 0), what))
    return found


def _private_use(node: ast.AST, own: set[str]) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.module:
        parts = node.module.split(".")
        if parts[0] not in LIBRARIES:
            return []
        private = [p for p in parts if p.startswith("_") or p in PRIVATE_MODULES]
        names = [
            a.name
            for a in node.names
            if a.name.startswith("_") or a.name in PRIVATE_MODULES | PRIVATE_NAMES
        ]
        return [f"from {node.module} import {', '.join(a.name for a in node.names)}"] * bool(
            private or names
        )
    if isinstance(node, ast.Import):
        return [
            f"import {alias.name}"
            for alias in node.names
            if alias.name.split(".")[0] in LIBRARIES
            and any(p.startswith("_") or p in PRIVATE_MODULES for p in alias.name.split("."))
        ]
    if isinstance(node, ast.ClassDef):
        # Subclassing a client class means overriding (and calling) its private methods.
        # (google.auth's transport Request/Response are interfaces made to be implemented.)
        return [
            f"class {node.name}({ast.unparse(base)})"
            for base in node.bases
            if ast.unparse(base).startswith(CLIENT_CLASSES)
        ]
    if isinstance(node, ast.Attribute):
        attr = node.attr
        if attr in PRIVATE_NAMES or attr in PRIVATE_MODULES:
            return [ast.unparse(node)]
        if not attr.startswith("_") or attr.startswith("__"):
            return []
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            return []  # our own classes' state (none subclasses a client class: see above)
        return [ast.unparse(node)] if attr in LIBRARY_PRIVATE or attr not in own else []
    if isinstance(node, ast.Constant) and node.value in GETATTR_NAMES:
        return [repr(node.value)]  # getattr(x, "_pb", x) and the like
    return []


def test_services_use_no_private_part_of_a_google_client_library() -> None:
    trees = _trees(SERVICES)
    found = _findings(trees, _own_names(trees), SERVICES)
    unexpected = [f for f in found if (f[0], f[2]) not in KNOWN]
    listing = "\n".join(f"services/{where}:{line}: {what}" for where, line, what in unexpected)
    assert not unexpected, f"private parts of Google client libraries used:\n{listing}"


def test_every_known_exception_is_still_there() -> None:
    trees = _trees(SERVICES)
    found = {(where, what) for where, _, what in _findings(trees, _own_names(trees), SERVICES)}
    stale = [key for key in KNOWN if key not in found]
    assert not stale, f"no longer used, drop from KNOWN: {stale}"


def test_the_check_finds_what_it_is_meant_to_find(tmp_path: Path) -> None:
    (tmp_path / "sample.py").write_text(
        """
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.bulk_batch import BulkWriteBatch
import google.cloud._helpers
from google.cloud import firestore
from services.store.gateway import Gateway


class Bounded(firestore.Transaction):
    pass


raw = response._pb
api = client._firestore_api
other = client._some_private_thing
same = getattr(result, "_pb", result)
ours = docs._observe
mine = self._anything
"""
    )
    own = _own_names(_trees(SERVICES))
    found = [what for _, _, what in _findings(_trees(tmp_path), own, tmp_path)]
    assert found == [
        "from google.cloud.firestore_v1 import _helpers",
        "from google.cloud.firestore_v1.bulk_batch import BulkWriteBatch",
        "import google.cloud._helpers",
        "class Bounded(firestore.Transaction)",
        "response._pb",
        "client._firestore_api",
        "client._some_private_thing",
        "'_pb'",
    ], found
