"""The schema read out of the protobuf descriptors: what every generator works from."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2

from codegen import schema_options_pb2 as opts

SCALARS = {
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING: "string",
    descriptor_pb2.FieldDescriptorProto.TYPE_BOOL: "boolean",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT32: "int32",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT64: "int64",
}


@dataclass
class EnumType:
    name: str
    doc: str
    values: list[tuple[str, str]]  # (stored string, doc)


@dataclass
class Field:
    name: str
    json_name: str
    doc: str
    kind: str  # "string" | "boolean" | "int32" | "int64" | "enum" | "message"
    ref: str | None  # enum or message name
    repeated: bool
    options: Any  # schema_options_pb2.FieldSchema
    # A protobuf map (`map<string, V>`): a JSON object whose values are V (kind and ref are V's).
    map: bool = False

    @property
    def default(self) -> Any:
        return json.loads(self.options.default) if self.options.default else None

    @property
    def has_default(self) -> bool:
        return bool(self.options.default)


@dataclass
class Message:
    name: str
    doc: str
    fields: list[Field]
    options: Any  # schema_options_pb2.MessageSchema
    resource: Any | None  # schema_options_pb2.Resource

    @property
    def opaque(self) -> bool:
        return bool(self.options.preserve_unknown_fields)

    @property
    def int_or_string(self) -> bool:
        """Stored as an integer or a string (a Kubernetes quantity or IntOrString)."""
        return bool(self.options.int_or_string)


@dataclass
class Schema:
    source: str
    doc: str
    messages: dict[str, Message] = field(default_factory=dict)
    enums: dict[str, EnumType] = field(default_factory=dict)

    @property
    def root(self) -> Message:
        roots = [m for m in self.messages.values() if m.resource is not None]
        if len(roots) != 1:
            raise ValueError(f"{self.source}: exactly one message needs a resource option")
        return roots[0]

    @property
    def resource(self) -> Any:
        """The root message's resource option (schema_options_pb2.Resource)."""
        return self.root.resource


def _comments(fd: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    return {
        tuple(loc.path): _clean(loc.leading_comments)
        for loc in fd.source_code_info.location
        if loc.leading_comments
    }


def _clean(comment: str) -> str:
    paragraphs = [" ".join(p.split()) for p in comment.strip().split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p)


def _short(type_name: str) -> str:
    return type_name.rsplit(".", 1)[-1]


def declares_resource(fd: descriptor_pb2.FileDescriptorProto) -> bool:
    """A file with a message carrying the resource option, from which a resource is generated."""
    return any(msg.options.HasExtension(opts.resource) for msg in fd.message_type)


def read(
    fd: descriptor_pb2.FileDescriptorProto,
    imported: Sequence[descriptor_pb2.FileDescriptorProto] = (),
) -> Schema:
    """The schema of a resource's file, with the messages and enums of the `imported` files
    (shared messages, which declare no resource) as if written in it."""
    schema = _read_one(fd)
    for other in imported:
        shared = _read_one(other)
        schema.messages = {**shared.messages, **schema.messages}
        schema.enums = {**shared.enums, **schema.enums}
    return schema


def _read_one(fd: descriptor_pb2.FileDescriptorProto) -> Schema:
    comments = _comments(fd)
    file_doc = next(
        (
            _clean(loc.leading_detached_comments[0])
            for loc in fd.source_code_info.location
            if tuple(loc.path) == (12,) and loc.leading_detached_comments
        ),
        "",
    )
    schema = Schema(source=fd.name, doc=file_doc)
    for index, enum in enumerate(fd.enum_type):
        values = [
            (v.options.Extensions[opts.value].name, comments.get((5, index, 2, vi), ""))
            for vi, v in enumerate(enum.value)
            if v.number != 0
        ]
        schema.enums[enum.name] = EnumType(enum.name, comments.get((5, index), ""), values)
    for index, msg in enumerate(fd.message_type):
        entries = {
            f".{fd.package}.{msg.name}.{nested.name}": nested
            for nested in msg.nested_type
            if nested.options.map_entry
        }
        fields = [
            _field(f, comments.get((4, index, 2, fi), ""), entries)
            for fi, f in enumerate(msg.field)
        ]
        resource = (
            msg.options.Extensions[opts.resource]
            if msg.options.HasExtension(opts.resource)
            else None
        )
        schema.messages[msg.name] = Message(
            msg.name,
            comments.get((4, index), ""),
            fields,
            msg.options.Extensions[opts.schema],
            resource,
        )
    return schema


def _field(
    f: descriptor_pb2.FieldDescriptorProto,
    doc: str,
    entries: dict[str, descriptor_pb2.DescriptorProto],
) -> Field:
    entry = entries.get(f.type_name) if f.type_name else None
    if entry is not None:  # a map: a repeated entry message of a key and a value
        key, value = entry.field
        if key.type != descriptor_pb2.FieldDescriptorProto.TYPE_STRING:
            raise ValueError(f"field {f.name}: a map's keys must be strings")
        kind, ref = _kind(value)
    else:
        kind, ref = _kind(f)
    return Field(
        name=f.name,
        json_name=f.json_name,
        doc=doc,
        kind=kind,
        ref=ref,
        repeated=entry is None and f.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
        options=f.options.Extensions[opts.field],
        map=entry is not None,
    )


def _kind(f: descriptor_pb2.FieldDescriptorProto) -> tuple[str, str | None]:
    if f.type in SCALARS:
        kind, ref = SCALARS[f.type], None
    elif f.type == descriptor_pb2.FieldDescriptorProto.TYPE_ENUM:
        kind, ref = "enum", _short(f.type_name)
    elif f.type == descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE:
        kind, ref = "message", _short(f.type_name)
    else:
        raise ValueError(f"field {f.name}: protobuf type {f.type} has no Kubernetes form")
    return kind, ref
