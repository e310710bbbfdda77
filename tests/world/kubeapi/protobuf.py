"""Request bodies in Kubernetes' protobuf encoding, for the kinds kubectl creates that way.

kubectl (client-go) sends built-in objects as `application/vnd.kubernetes.protobuf`, and
client-go has no fallback to JSON for protobuf (its 415 fallback is for CBOR only), so a server
must read it: `k8s\\x00`, then a runtime.Unknown (1: typeMeta {1: apiVersion, 2: kind}, 2: raw,
3: contentEncoding, 4: contentType) whose raw bytes are the object's message, with the field
numbers of k8s.io/api/core/v1/generated.proto and apimachinery's ObjectMeta. The kinds this
emulator reads so are those of `kubectl create secret|namespace|configmap|serviceaccount`;
others answer 415 as kube-apiserver does for a type it cannot decode that way.
"""

from __future__ import annotations

import base64
from typing import Any

from .errors import StatusError

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

Fields = list[tuple[int, int, Any]]  # (field number, wire type, value)


class Unsupported(Exception):
    """Not a protobuf body this emulator can read."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise Unsupported("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def fields(data: bytes) -> Fields:
    """The raw fields of one message (varints, fixed and length-delimited)."""
    found: Fields = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            length, at = _varint(data, at)
            value, at = data[at : at + length], at + length
        elif wire == 1:
            value, at = data[at : at + 8], at + 8
        elif wire == 5:
            value, at = data[at : at + 4], at + 4
        else:
            raise Unsupported(f"wire type {wire}")
        found.append((number, wire, value))
    return found


def _text(value: bytes) -> str:
    return value.decode("utf-8")


def _map(entries: list[bytes], as_bytes: bool) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for entry in entries:
        parts = {n: v for n, _, v in fields(entry)}
        key = _text(parts.get(1, b""))
        value = parts.get(2, b"")
        result[key] = base64.b64encode(value).decode() if as_bytes else _text(value)
    return result


def _object_meta(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    labels, annotations, finalizers = [], [], []
    for number, _, value in fields(data):
        if number in (1, 2, 3):
            if value:  # Go's zero value is sent too; the JSON form omits it
                meta[("name", "generateName", "namespace")[number - 1]] = _text(value)
        elif number == 11:
            labels.append(value)
        elif number == 12:
            annotations.append(value)
        elif number == 14:
            finalizers.append(_text(value))
        elif number in (4, 5, 6, 7, 8, 17):
            continue  # read-only or server-set fields a create carries empty
        else:
            raise Unsupported(f"ObjectMeta field {number}")
    if labels:
        meta["labels"] = _map(labels, as_bytes=False)
    if annotations:
        meta["annotations"] = _map(annotations, as_bytes=False)
    if finalizers:
        meta["finalizers"] = finalizers
    return meta


# Per kind: field number -> (JSON name, how to read it). "meta" is ObjectMeta, "map" a
# map<string,string>, "bytes-map" a map<string,bytes> (base64 in JSON), "skip" the server's own.
Layout = dict[int, tuple[str, str]]
LAYOUTS: dict[tuple[str, str], Layout] = {
    ("v1", "Secret"): {
        1: ("metadata", "meta"),
        2: ("data", "bytes-map"),
        3: ("type", "string"),
        4: ("stringData", "map"),
        5: ("immutable", "bool"),
    },
    ("v1", "ConfigMap"): {
        1: ("metadata", "meta"),
        2: ("data", "map"),
        3: ("binaryData", "bytes-map"),
        4: ("immutable", "bool"),
    },
    ("v1", "Namespace"): {1: ("metadata", "meta"), 2: ("spec", "namespace-spec"), 3: ("", "skip")},
    ("v1", "ServiceAccount"): {
        1: ("metadata", "meta"),
        3: ("automountServiceAccountToken", "bool"),
    },
}


def _object(kind: str, layout: Layout, parts: Fields) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    maps: dict[str, list[bytes]] = {}
    for number, _, value in parts:
        if number not in layout:
            raise Unsupported(f"{kind} field {number}")
        name, how = layout[number]
        if how == "meta":
            obj[name] = _object_meta(value)
        elif how in ("map", "bytes-map"):
            maps.setdefault(name, []).append(value)
        elif how == "string" and value:
            obj[name] = _text(value)
        elif how == "bool":
            obj[name] = bool(value)
        elif how == "namespace-spec":
            finalizers = [_text(v) for n, _, v in fields(value) if n == 1]
            obj[name] = {"finalizers": finalizers} if finalizers else {}
    for name, entries in maps.items():
        obj[name] = _map(entries, as_bytes=layout_kind(layout, name) == "bytes-map")
    return obj


def layout_kind(layout: Layout, name: str) -> str:
    return next(how for field_name, how in layout.values() if field_name == name)


def decode(body: bytes) -> dict[str, Any]:
    """The object a protobuf request body holds, as the JSON the API serves."""
    if not body.startswith(MAGIC):
        raise Unsupported("no k8s protobuf prefix")
    envelope = {n: v for n, _, v in fields(body[len(MAGIC) :])}
    type_meta = {n: _text(v) for n, _, v in fields(envelope.get(1, b""))}
    api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
    if _text(envelope.get(3, b"")):
        raise Unsupported("content encoding")
    layout = LAYOUTS.get((api_version, kind))
    if layout is None:
        raise Unsupported(f"{api_version} {kind}")
    obj = _object(kind, layout, fields(envelope.get(2, b"")))
    return {"apiVersion": api_version, "kind": kind, **obj}


def read_body(content_type: str, raw: bytes) -> dict[str, Any]:
    """A protobuf body decoded, or kube-apiserver's 415 for one it cannot read."""
    try:
        return decode(raw)
    except (Unsupported, UnicodeDecodeError, IndexError) as exc:
        raise StatusError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"application/json, application/yaml ({content_type}: {exc})",
        ) from exc
