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
from collections.abc import Callable
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


def _secret(parts: Fields) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    data, string_data = [], []
    for number, _, value in parts:
        if number == 1:
            obj["metadata"] = _object_meta(value)
        elif number == 2:
            data.append(value)
        elif number == 3:
            if value:
                obj["type"] = _text(value)
        elif number == 4:
            string_data.append(value)
        elif number == 5:
            obj["immutable"] = bool(value)
        else:
            raise Unsupported(f"Secret field {number}")
    if data:
        obj["data"] = _map(data, as_bytes=True)
    if string_data:
        obj["stringData"] = _map(string_data, as_bytes=False)
    return obj


def _config_map(parts: Fields) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    data, binary = [], []
    for number, _, value in parts:
        if number == 1:
            obj["metadata"] = _object_meta(value)
        elif number == 2:
            data.append(value)
        elif number == 3:
            binary.append(value)
        elif number == 4:
            obj["immutable"] = bool(value)
        else:
            raise Unsupported(f"ConfigMap field {number}")
    if data:
        obj["data"] = _map(data, as_bytes=False)
    if binary:
        obj["binaryData"] = _map(binary, as_bytes=True)
    return obj


def _namespace(parts: Fields) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, _, value in parts:
        if number == 1:
            obj["metadata"] = _object_meta(value)
        elif number == 2:
            finalizers = [_text(v) for n, _, v in fields(value) if n == 1]
            obj["spec"] = {"finalizers": finalizers} if finalizers else {}
        elif number == 3:
            continue  # status is the server's
        else:
            raise Unsupported(f"Namespace field {number}")
    return obj


def _service_account(parts: Fields) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, _, value in parts:
        if number == 1:
            obj["metadata"] = _object_meta(value)
        elif number == 3:
            obj["automountServiceAccountToken"] = bool(value)
        else:
            raise Unsupported(f"ServiceAccount field {number}")
    return obj


DECODERS: dict[tuple[str, str], Callable[[Fields], dict[str, Any]]] = {
    ("v1", "Secret"): _secret,
    ("v1", "ConfigMap"): _config_map,
    ("v1", "Namespace"): _namespace,
    ("v1", "ServiceAccount"): _service_account,
}


def decode(body: bytes) -> dict[str, Any]:
    """The object a protobuf request body holds, as the JSON the API serves."""
    if not body.startswith(MAGIC):
        raise Unsupported("no k8s protobuf prefix")
    envelope = {n: v for n, _, v in fields(body[len(MAGIC) :])}
    type_meta = {n: _text(v) for n, _, v in fields(envelope.get(1, b""))}
    api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
    if _text(envelope.get(3, b"")):
        raise Unsupported("content encoding")
    decoder = DECODERS.get((api_version, kind))
    if decoder is None:
        raise Unsupported(f"{api_version} {kind}")
    return {"apiVersion": api_version, "kind": kind, **decoder(fields(envelope.get(2, b"")))}


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
