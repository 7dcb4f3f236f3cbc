"""`FirestoreJobStore` is its roles, inherited (services/store/job_store.py): every operation is
the role's own method, so no two roles may define the same name (one would silently hide the
other), and the store adds nothing of its own but its constructor and two properties."""

from __future__ import annotations

import inspect
from collections import Counter

from services.store.job_store import ROLES, FirestoreJobStore

# What the store class defines itself: building the roles on one Documents, and two read-only
# properties of that Documents. Anything more would be a forwarder or a rule outside its role.
STORE_OWN = {"__init__", "clock", "shards"}
SHARED = {"__init__"}  # every role's constructor, called one by one from the store's


def own_names(cls: type) -> set[str]:
    return {name for name in vars(cls) if not (name.startswith("__") and name != "__init__")}


def test_no_two_roles_define_the_same_name() -> None:
    counts = Counter(name for role in ROLES for name in own_names(role) - SHARED)
    assert [name for name, n in counts.items() if n > 1] == []


def test_the_store_class_is_every_role_and_defines_no_operation_of_its_own() -> None:
    assert FirestoreJobStore.__bases__ == ROLES
    assert own_names(FirestoreJobStore) == STORE_OWN


def test_every_public_operation_is_a_roles_own_method() -> None:
    operations = {
        name
        for name, _ in inspect.getmembers(FirestoreJobStore, inspect.isfunction)
        if not name.startswith("_")
    }
    for name in operations:
        owners = [role.__name__ for role in ROLES if name in vars(role)]
        assert len(owners) == 1, (name, owners)
