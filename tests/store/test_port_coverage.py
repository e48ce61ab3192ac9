"""The port stays whole and lean: every method of every port a transaction offers
(``store.port.ReadTransaction``, ``WriteTransaction``) is called, as
``<port>.<method>``, by one of the conformance suite's files and by production code
outside the store; and the import contract that keeps services, workers and
transports on the port names every other store module."""

from __future__ import annotations

import inspect
import re
import tomllib
import typing
from pathlib import Path

from uns_server.store import port

SUITE = [
    Path(__file__).with_name(name)
    for name in (
        "test_conformance.py",
        "test_moves.py",
        "test_port_directory.py",
        "test_port_upkeep.py",
        "test_port_accept.py",
        "test_jobs.py",
        "test_port_heartbeats.py",
        "test_port_console.py",
    )
]


def port_methods() -> set[tuple[str, str]]:
    """(port attribute, method) for every method a transaction's ports offer."""
    found = set()
    for transaction in (port.ReadTransaction, port.WriteTransaction):
        for attr, member in inspect.getmembers(transaction):
            if not isinstance(member, property) or member.fget is None:
                continue
            protocol = typing.get_type_hints(member.fget)["return"]
            for name, _method in inspect.getmembers(protocol, inspect.isfunction):
                if not name.startswith("_"):
                    found.add((attr, name))
    return found


def test_every_port_method_is_exercised_by_the_suite() -> None:
    text = "\n".join(path.read_text() for path in SUITE)
    methods = port_methods()
    assert len(methods) > 60  # the port as it stands; a broken lookup finds none
    missing = sorted(
        f"{attr}.{name}" for attr, name in methods if not re.search(rf"\b{attr}\.{name}\b", text)
    )
    assert missing == []


def test_the_import_contract_forbids_every_store_module_but_the_port() -> None:
    """``pyproject.toml``'s contract lists the store's modules by name: one added to the
    store must be added there, or services could import it unnoticed."""
    root = Path(__file__).parents[2]
    contracts = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [c for c in contracts["contracts"] if "store.port" in c["name"]]
    store = root / "uns_server" / "store"
    modules = {p.stem for p in store.glob("*.py") if p.stem != "__init__"}
    modules |= {p.name for p in store.iterdir() if (p / "__init__.py").exists()} - {"port"}
    assert set(contract["forbidden_modules"]) == {f"uns_server.store.{m}" for m in modules}


def test_every_port_method_has_a_production_caller() -> None:
    """What no service or worker calls is deleted, not kept for tests."""
    package = Path(__file__).parents[2] / "uns_server"
    text = "\n".join(
        path.read_text() for path in package.rglob("*.py") if "store" not in path.parts
    )
    unused = sorted(
        f"{attr}.{name}"
        for attr, name in port_methods()
        if not re.search(rf"\b{attr}\.{name}\(", text)
    )
    assert unused == []
