"""The conformance suite covers the whole port: every method of every port a
transaction offers (``store.port.ReadTransaction``, ``WriteTransaction``) is called,
as ``<port>.<method>``, by one of the suite's files. A method added to the port
without a conformance test fails here."""

from __future__ import annotations

import inspect
import re
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
        "test_statistics.py",
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
