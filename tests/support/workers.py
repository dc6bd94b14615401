"""Which tests share a pytest-xdist worker, and in what order the tests run: what the hooks of
``tests/conftest.py`` decide (``tests/test_harness.py`` checks it on real workers)."""

from __future__ import annotations

from collections.abc import Iterable

import pytest


def shared_fixtures(item: pytest.Item) -> list[str]:
    """The module- and class-scoped fixtures ``item`` uses, as ``<test module>:<fixture>``: a
    fixture that a worker builds once for the tests of a module."""
    fixture_info = getattr(item, "_fixtureinfo", None)
    if fixture_info is None:
        return []
    return sorted(
        f"{item.module.__name__}:{name}"
        for name, definitions in fixture_info.name2fixturedefs.items()
        if definitions[-1].scope in ("module", "class")
    )


def fixture_groups(uses: Iterable[list[str]]) -> dict[str, str]:
    """Each fixture of ``uses`` (the shared fixtures of each test) and the name of its group:
    fixtures that a test uses together are in one group, and so, through them, are the tests
    that use any of them. A group is named by its first fixture."""
    groups: list[set[str]] = []
    for fixtures in map(set, uses):
        if fixtures:
            joined = fixtures.union(*(group for group in groups if group & fixtures))
            groups = [group for group in groups if not group & joined] + [joined]
    return {fixture: min(group) for group in groups for fixture in group}


def group_by_shared_fixtures(items: list[pytest.Item]) -> None:
    """Mark each test that uses a shared fixture ``xdist_group`` with the group of its
    fixtures (:func:`fixture_groups`), so that ``--dist loadgroup`` runs the tests sharing a
    fixture on one worker and it is built once. The other tests spread freely."""
    shared = [(item, shared_fixtures(item)) for item in items]
    group_of = fixture_groups(fixtures for _, fixtures in shared)
    for item, fixtures in shared:
        if fixtures:
            item.add_marker(pytest.mark.xdist_group(group_of[fixtures[0]]))


def slow_first(items: list[pytest.Item]) -> None:
    """Order the modules by how many slow tests they hold, most first, and each module's slow
    tests before its quick ones: the workers start with the long tests and end on short ones,
    instead of one of them finishing a long test alone. A module's tests stay together, so that
    a worker builds a module fixture once."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def slow(item: pytest.Item) -> bool:
        return item.get_closest_marker("slow") is not None

    ordered = sorted(modules.values(), key=lambda tests: -sum(map(slow, tests)))
    items[:] = [item for tests in ordered for item in sorted(tests, key=lambda t: not slow(t))]
