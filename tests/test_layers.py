"""Each module imports only its own layer and the layers below (docs/architecture.md).

Imports are read from the source (those inside functions too), so a lazy import that reaches up
counts. The exceptions still to move are listed by name: the list may shrink, never grow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Bottom up; a module belongs to the last layer one of whose prefixes it starts with.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("model", (
        "relay.errors", "relay.arguments", "relay.durations", "relay.clock", "relay.runs",
        "relay.schedules", "relay.cron", "relay.instances", "relay.retries", "relay.events",
        "relay.expectations", "relay.layout",
    )),
    ("contract", (
        "relay.contract", "relay.jobs", "relay.lease_rules", "relay.deadlines", "relay.stored",
        "relay.schedule_store", "relay.definitions", "relay.overdue",
    )),
    ("backends", ("relay.backends",)),
    ("engine", ("relay.engine", "relay.health")),
    ("hosts", (
        "relay.scheduler", "relay.consumer_mode", "relay.fencing", "relay.settings",
        "relay.tracing", "relay_celery", "relay_dramatiq",
    )),
]  # fmt: skip
SURFACES = len(LAYERS)  # every other module: the CLI, control, Django, timeline, metrics...
# What reaches up today, to be moved (see docs/architecture.md, "Known exceptions").
KNOWN = {
    ("relay.settings", "relay.contrib.django.database"),  # Django's DATABASES, read lazily
}


def layer(module: str) -> int:
    """The layer's index of ``module`` (relay itself, which re-exports everything, is a surface)."""
    found = SURFACES
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            found = index
    return found


def modules() -> Iterator[tuple[str, Path]]:
    for base in (ROOT / "shared", ROOT):
        for package in ("relay",) if base.name == "shared" else ("relay_celery", "relay_dramatiq"):
            for path in sorted((base / package).rglob("*.py")):
                parts = path.relative_to(base).with_suffix("").parts
                yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imports(path: Path) -> set[str]:
    """The project's modules ``path`` imports (``from relay import x`` names ``relay.x``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "relay":  # a submodule, or a name the package defines
                found.update(f"relay.{a.name}" for a in node.names if not a.name.startswith("__"))
            else:
                found.add(node.module)
    return {
        name for name in found if name.split(".")[0] in ("relay", "relay_celery", "relay_dramatiq")
    }


def reaching_up() -> set[tuple[str, str]]:
    """Every (importer, imported) pair that breaks the layers."""
    broken = set()
    for module, path in modules():
        mine = layer(module)
        for name in imports(path):
            theirs = layer(name)
            beside_backends = mine == 3 and theirs == 2  # the engine reads stores by the contract
            if theirs > mine or beside_backends:
                broken.add((module, name))
    return broken


def test_no_module_reaches_up_beyond_the_known_exceptions() -> None:
    broken = reaching_up()
    assert broken <= KNOWN, f"imports that reach up (see docs/architecture.md): {broken - KNOWN}"


def test_the_known_exceptions_still_exist() -> None:
    # One that was moved leaves this list: it must not come back unnoticed.
    assert reaching_up() >= KNOWN, f"moved, so strike from KNOWN: {KNOWN - reaching_up()}"


def test_the_layers_cover_the_modules_they_name() -> None:
    names = {module for module, _ in modules()}
    for _, prefixes in LAYERS:
        for prefix in prefixes:
            assert any(n == prefix or n.startswith(prefix + ".") for n in names), prefix
