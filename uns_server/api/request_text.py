"""Every string of a request, checked for the NUL character (``domain.fields``).

PostgreSQL refuses NUL in a text column, so a NUL anywhere (a recipient's name, a
policy's channel, a metadata key, a withdrawal reason, a filter) would otherwise be a
server error on one dialect only. The decode step (``handlers.decode_guard``) asks
this for every ``uns.v1`` request, so no field can be forgotten. A NUL character is
the byte 0x00 in the serialized request, so requests without that byte (nearly all)
are not walked at all.

Field paths are the protobuf field names (``recipient.contacts[0].address``); inside
a ``google.protobuf.Struct`` they are its keys (``metadata.region``, ``metadata.tags[1]``),
as the validation of metadata names them. A NUL in a map key or a Struct key names the
map itself (the key cannot be written in a path).

A ``SendNotificationRequest`` is left to ``domain.validation.validate_send``, which
applies the same rule to each of its fields: a batch refuses only its invalid items.
An ``AcknowledgeRequest`` (an id and metadata, both validated by ``services.acks``)
is left alone too: its numeric metadata holds 0x00 bytes (doubles), and walking a
Struct costs ten times the parse.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from uns_server.domain.fields import NUL

_STRUCT = "google.protobuf.Struct"
_VALUE = "google.protobuf.Value"
_LIST = "google.protobuf.ListValue"
# Messages whose every string field their own validation checks (see above).
_VALIDATED = frozenset({"uns.v1.SendNotificationRequest", "uns.v1.AcknowledgeRequest"})


def nul_fields(raw: bytes, message: Message) -> list[str]:
    """The paths of the strings of ``message`` (decoded from ``raw``) holding NUL."""
    if b"\x00" not in raw:
        return []
    found: list[str] = []
    _message(message, "", found)
    return found


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _message(message: Message, path: str, found: list[str]) -> None:
    full_name = message.DESCRIPTOR.full_name
    if full_name in (_STRUCT, _VALUE, _LIST):
        _json(message, path, found)
        return
    if full_name in _VALIDATED:
        return
    for field, value in message.ListFields():
        at = _join(path, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            _map(field, value, at, found)
        elif field.is_repeated:
            for i, item in enumerate(value):
                _value(field, item, f"{at}[{i}]", found)
        else:
            _value(field, value, at, found)


def _value(field: FieldDescriptor, value: Any, at: str, found: list[str]) -> None:
    if field.type == FieldDescriptor.TYPE_STRING:
        if NUL in value:
            found.append(at)
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        _message(value, at, found)


def _map(field: FieldDescriptor, value: Any, at: str, found: list[str]) -> None:
    entry = field.message_type
    assert entry is not None  # a map field's entry message
    value_field = entry.fields_by_name["value"]
    for key, item in value.items():
        if isinstance(key, str) and NUL in key:
            found.append(at)
            continue
        _value(value_field, item, f"{at}[{key}]", found)


def _json(message: Any, path: str, found: list[str]) -> None:
    """A Struct, Value or ListValue, named as JSON: ``metadata.key[0]``."""
    name = message.DESCRIPTOR.full_name
    if name == _STRUCT:
        for key, item in message.fields.items():
            if NUL in key:
                found.append(path)
            else:
                _json(item, _join(path, key), found)
    elif name == _LIST:
        for i, item in enumerate(message.values):
            _json(item, f"{path}[{i}]", found)
    else:
        kind = message.WhichOneof("kind")
        if kind == "string_value" and NUL in message.string_value:
            found.append(path)
        elif kind in ("struct_value", "list_value"):
            _json(getattr(message, kind), path, found)
