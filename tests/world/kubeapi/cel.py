"""kube-apiserver's CEL environment for admission, on a real CEL runtime (cel-expr-python).

The runtime is Google's C++ CEL through its Python bindings, with the strings and bindings
extensions (``join``, ``substring``, ``cel.bind``) Kubernetes enables. The Kubernetes quantity
library (``staging/src/k8s.io/apiserver/pkg/cel/library/quantity.go``) is added here: quantity(),
isQuantity(), sign(), isInteger(), asInteger(), compareTo(), isGreaterThan() and isLessThan(),
with apimachinery's parser (``quantity.py``). The runtime cannot hold an opaque type from Python,
so a quantity travels as a one-key map ``{"@quantity": "<text>"}``; expressions only ever see it
through those functions.

Variables are the admission ones: ``object``, ``oldObject``, ``request``, ``params``,
``namespaceObject`` and ``variables`` (a policy's own, evaluated lazily, each at most once per
request, as kube-apiserver does). Gaps: no type checking against the OpenAPI schema (every
variable is dyn), no cost budget, no authorizer library.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_strings

from tests.world.kubeapi import quantity as q

QUANTITY_KEY = "@quantity"
ADMISSION_VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject", "variables")
_VARIABLE_USE = re.compile(r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)")


class CelError(Exception):
    """A compile or evaluation error, worded as the runtime words it."""


def _value(arg: Any) -> Fraction:
    if isinstance(arg, Mapping) and QUANTITY_KEY in arg:
        return q.parse(str(arg[QUANTITY_KEY]))
    raise CelError("no such overload")


def _quantity(text: str) -> dict[str, str]:
    q.parse(text)  # raises on a bad quantity, as quantity() does
    return {QUANTITY_KEY: text}


def _as_integer(arg: Any) -> int:
    value = q.as_int64(_value(arg))
    if value is None:
        raise CelError("cannot convert value to integer")
    return value


def _cmp(a: Any, b: Any) -> int:
    left, right = _value(a), _value(b)
    return (left > right) - (left < right)


def _function(
    name: str,
    overload: str,
    result: Any,
    params: list[Any],
    member: bool,
    impl: Callable[..., Any],
) -> cel.FunctionDecl:
    return cel.FunctionDecl(
        name, [cel.Overload(overload, result, params, is_member=member, impl=impl)]
    )


D, B, I, S = cel.Type.DYN, cel.Type.BOOL, cel.Type.INT, cel.Type.STRING  # noqa: E741
_QUANTITY_LIBRARY = cel.CelExtension(
    "kubernetes.quantity",
    [
        _function("quantity", "string_to_quantity", D, [S], False, _quantity),
        _function("isQuantity", "is_quantity_string", B, [S], False, q.is_quantity),
        _function(
            "sign", "quantity_sign", I, [D], True, lambda a: (_value(a) > 0) - (_value(a) < 0)
        ),
        _function(
            "isInteger",
            "quantity_is_integer",
            B,
            [D],
            True,
            lambda a: q.as_int64(_value(a)) is not None,
        ),
        _function("asInteger", "quantity_get_int", I, [D], True, _as_integer),
        _function("compareTo", "quantity_compare_to", I, [D, D], True, _cmp),
        _function(
            "isGreaterThan",
            "quantity_is_greater_than",
            B,
            [D, D],
            True,
            lambda a, b: _cmp(a, b) == 1,
        ),
        _function(
            "isLessThan", "quantity_is_less_than", B, [D, D], True, lambda a, b: _cmp(a, b) == -1
        ),
    ],
)

_ENV = cel.NewEnv(
    variables={name: D for name in ADMISSION_VARIABLES},
    extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings(), _QUANTITY_LIBRARY],
)


def compile_expression(expression: str) -> Any:
    try:
        return _ENV.compile(expression)
    except Exception as error:  # the runtime raises plain exceptions with its message
        raise CelError(str(error)) from None


@dataclass
class Activation:
    """One request's inputs, and a policy's variables evaluated on first use."""

    inputs: dict[str, Any]
    variables: Mapping[str, str] = field(default_factory=dict)  # name -> expression
    _done: dict[str, Any] = field(default_factory=dict)
    _running: set[str] = field(default_factory=set)

    def evaluate(self, expression: str) -> Any:
        for name in dict.fromkeys(_VARIABLE_USE.findall(expression)):
            self._variable(name)
        program = compile_expression(expression)
        try:
            result = program.eval(data={**self.inputs, "variables": dict(self._done)})
        except Exception as error:
            raise CelError(str(error)) from None
        if result.type() == cel.Type.ERROR:  # an error value, e.g. "no such key"
            raise CelError(str(result.value()))
        return result.plain_value()

    def _variable(self, name: str) -> None:
        if name in self._done or name not in self.variables:
            return  # unknown names fail in the expression itself ("no such key")
        if name in self._running:
            raise CelError(f"variable {name} refers to itself")
        self._running.add(name)
        try:
            self._done[name] = self.evaluate(self.variables[name])
        finally:
            self._running.discard(name)
