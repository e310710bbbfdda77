"""The compile-time checks kube-apiserver adds to cel-go's type checker, over a checked AST.

``base.go`` turns on ``HomogeneousAggregateLiterals`` and the AST validators for duration,
timestamp and regex literals: ``['a', 1]`` and ``'x'.matches('(')`` are refused when a policy is
written, not when it runs. The runtime here (cel-expr-python) checks neither, but it hands out
its checked expression (``Expression.serialize()``: a ``cel.expr.CheckedExpr`` in an ``Any``),
so these checks read that protobuf with the emulator's wire-format reader (`protobuf.fields`;
the runtime ships no Python protobuf classes) and walk the AST. Field numbers are those of
cel-spec's ``proto/cel/expr/{checked,syntax}.proto``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tests.world.kubeapi import protobuf

Fields = dict[int, list[bytes | int]]


def _fields(data: bytes) -> Fields:
    """One protobuf message: field number -> values (ints or raw bytes), in order."""
    out: Fields = {}
    for number, _wire, value in protobuf.fields(data):
        out.setdefault(number, []).append(value)
    return out


def _one(fields: Fields, number: int) -> bytes:
    value = fields.get(number, [b""])[0]
    return value if isinstance(value, bytes) else b""


def _int(fields: Fields, number: int) -> int:
    value = fields.get(number, [0])[0]
    return value if isinstance(value, int) else 0


def _messages(fields: Fields, number: int) -> list[Fields]:
    return [_fields(v) for v in fields.get(number, []) if isinstance(v, bytes)]


_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}


def type_name(raw: bytes) -> str | None:
    """A cel.expr.Type as cel-go names it; None for dyn and type parameters (assignable)."""
    fields = _fields(raw)
    if 1 in fields or 10 in fields:
        return None
    if 3 in fields:
        return _PRIMITIVES.get(_int(fields, 3), "dyn")
    if 2 in fields:
        return "null_type"
    if 6 in fields:
        element = type_name(_one(_messages(fields, 6)[0], 1) if _messages(fields, 6) else b"")
        return f"list({element or 'dyn'})"
    if 7 in fields:
        entry = _messages(fields, 7)[0]
        key, value = type_name(_one(entry, 1)), type_name(_one(entry, 2))
        return f"map({key or 'dyn'}, {value or 'dyn'})"
    if 9 in fields:
        return _one(fields, 9).decode()
    if 14 in fields:
        return _one(_messages(fields, 14)[0], 1).decode()
    return "dyn"


@dataclass
class CheckedExpr:
    root: Fields
    types: dict[int, bytes] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, serialized: bytes) -> CheckedExpr:
        checked = _fields(_one(_fields(serialized), 2))  # google.protobuf.Any.value
        types = {}
        for entry in _messages(checked, 3):  # map<int64, Type> type_map
            types[_int(entry, 1)] = _one(entry, 2)
        positions = {}
        for info in _messages(checked, 5):  # SourceInfo.positions map<int64, int32>
            for entry in _messages(info, 4):
                positions[_int(entry, 1)] = _int(entry, 2)
        return cls(_fields(_one(checked, 4)), types, positions)

    def walk(self) -> Iterator[Fields]:
        stack = [self.root]
        while stack:
            expr = stack.pop()
            yield expr
            for kind in (5, 6, 7, 8, 9):  # select, call, list, struct, comprehension
                for node in _messages(expr, kind):
                    stack.extend(_children(kind, node))


def _children(kind: int, node: Fields) -> list[Fields]:
    if kind == 5:
        return _messages(node, 1)
    if kind == 6:
        return _messages(node, 1) + _messages(node, 3)
    if kind == 7:
        return _messages(node, 1)
    if kind == 8:
        return [
            e for entry in _messages(node, 2) for e in _messages(entry, 3) + _messages(entry, 4)
        ]
    return [e for n in (2, 4, 5, 6, 7) for e in _messages(node, n)]


def _column(checked: CheckedExpr, expr: Fields) -> str:
    return f"<input>:1:{checked.positions.get(_int(expr, 2), 0) + 1}"


def _homogeneous(checked: CheckedExpr, exprs: list[Fields]) -> str | None:
    first: str | None = None
    for expr in exprs:
        name = type_name(checked.types.get(_int(expr, 2), b""))
        if name is None:
            continue
        if first is None:
            first = name
        elif name != first:
            return f"ERROR: {_column(checked, expr)}: expected type '{first}' but found '{name}'"
    return None


def _string_constant(expr: Fields) -> str | None:
    constants = _messages(expr, 3)
    if constants and 6 in constants[0]:
        return _one(constants[0], 6).decode()
    return None


# Literal arguments kube-apiserver checks when a policy is written: function -> (the checker's
# word for it, the argument's index counting a receiver first).
_LITERAL_CHECKS = {
    "matches": ("matches", 1),
    "find": ("find", 1),
    "findAll": ("findAll", 1),
    "duration": ("duration", 0),
    "timestamp": ("timestamp", 0),
}


# strings.format takes its arguments as one list literal of any types (cel-go exempts it).
_EXEMPT = frozenset({"format"})


def problems(serialized: bytes, literal_ok: Callable[[str, str], bool]) -> list[str]:
    """What the real server's checker refuses that the runtime's own checker let through:
    mixed-type list and map literals, and regex, duration and timestamp literals that do not
    parse (``literal_ok(function, text)`` asks the runtime)."""
    checked = CheckedExpr.parse(serialized)
    found = []
    exempt = {
        _int(arg, 2)
        for expr in checked.walk()
        for call in _messages(expr, 6)
        if _one(call, 2).decode() in _EXEMPT
        for arg in _messages(call, 3)
    }
    for expr in checked.walk():
        for node in _messages(expr, 7):
            if _int(expr, 2) not in exempt:
                found.append(_homogeneous(checked, _messages(node, 1)))
        for node in _messages(expr, 8):
            entries = _messages(node, 2)
            found.append(_homogeneous(checked, [k for e in entries for k in _messages(e, 3)]))
            found.append(_homogeneous(checked, [v for e in entries for v in _messages(e, 4)]))
        for call in _messages(expr, 6):
            function = _one(call, 2).decode()
            if function not in _LITERAL_CHECKS:
                continue
            word, index = _LITERAL_CHECKS[function]
            args = _messages(call, 1) + _messages(call, 3)
            text = _string_constant(args[index]) if len(args) > index else None
            if text is not None and not literal_ok(function, text):
                found.append(f"ERROR: {_column(checked, args[index])}: invalid {word} argument")
    return [p for p in found if p]
