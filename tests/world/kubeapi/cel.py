"""kube-apiserver's CEL environment for admission, on a real CEL runtime (cel-expr-python).

The environment is the one kube-apiserver 1.36 declares in
``staging/src/k8s.io/apiserver/pkg/cel/environment/base.go``, and nothing more:
- cel-go's extensions at Kubernetes' versions: strings version 2, sets, lists (the runtime's
  version 2, which holds everything of version 3 that 1.36 accepts: slice, flatten, distinct,
  sort, sortBy, range, reverse), optional types, two-variable comprehensions;
- cross-type numeric comparisons (``size() < 1.5e3``);
- Kubernetes' own libraries (``cel_library.py``);
- the literal checks (homogeneous aggregate literals; regex, duration and timestamp literals)
  that the real server runs when a policy is written (``cel_checks.py``).
No bindings (``cel.bind``), math or encoders extension: the real server refuses them.
``tests/world/fixtures/cel/compile.json`` records what 1.36.2 accepts and refuses; a test holds
this environment to every verdict in it.

Variables are the admission ones: ``object``, ``oldObject``, ``request``, ``namespaceObject``,
``authorizer`` and ``variables`` (a policy's own, evaluated lazily, each at most once per
request, as kube-apiserver does); ``params`` is not declared, as for a policy without
``paramKind``. Gaps: no type checking against the OpenAPI schema (objects are dyn), no cost
budget.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel

from tests.world.kubeapi import cel_checks
from tests.world.kubeapi.cel_library import AUTHORIZER, KUBERNETES_LIBRARY

ADMISSION_VARIABLES = ("object", "oldObject", "request", "namespaceObject", "authorizer")
_VARIABLE_USE = re.compile(r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)")

# cel-go's extensions as base.go enables them, in the runtime's own configuration language.
_EXTENSIONS = """
name: kubernetes
extensions:
  - name: strings
    version: 2
  - name: sets
  - name: lists
    version: 2
  - name: optional
  - name: two-var-comprehensions
"""
# cel.CrossTypeNumericComparisons: the runtime compares int, uint and double already; its
# checker lacks the declarations, and it refuses to have them declared twice.
_CROSS_TYPE = re.compile(
    r"found no matching overload for '_(?:<|<=|>|>=)_' applied to "
    r"'\((?:int|uint|double), (?:int|uint|double)\)'"
)


class CelError(Exception):
    """A compile or evaluation error, worded as the runtime words it."""


_ENV = cel.NewEnv(
    config=cel.NewEnvConfigFromYaml(_EXTENSIONS),
    variables={**{name: cel.Type.DYN for name in ADMISSION_VARIABLES}, "variables": cel.Type.DYN},
    extensions=[KUBERNETES_LIBRARY],
)
_LITERAL_PROBES = {
    "matches": "''.matches(x)",
    "find": "''.find(x)",
    "findAll": "''.findAll(x)",
    "duration": "duration(x)",
    "timestamp": "timestamp(x)",
}
_PROBE_ENV = cel.NewEnv(
    config=cel.NewEnvConfigFromYaml(_EXTENSIONS),
    variables={"x": cel.Type.STRING},
    extensions=[KUBERNETES_LIBRARY],
)


def _literal_ok(function: str, text: str) -> bool:
    try:
        result = _PROBE_ENV.compile(_LITERAL_PROBES[function]).eval(data={"x": text})
    except Exception:
        return False
    return result.type() != cel.Type.ERROR


def _errors(message: str) -> list[str]:
    return [line for line in message.splitlines() if "ERROR:" in line]


def compile_expression(expression: str, want_string: bool = False) -> Any:
    """The expression compiled as kube-apiserver compiles it, or CelError with its words.
    ``want_string``: a messageExpression, which must evaluate to a string."""
    try:
        program = _ENV.compile(expression)
    except Exception as error:  # the runtime raises plain exceptions with its message
        message = str(error)
        errors = _errors(message)
        if not errors or not all(_CROSS_TYPE.search(line) for line in errors):
            raise CelError(message) from None
        program = _ENV.compile(expression, disable_check=True)
        return program
    found = cel_checks.problems(program.serialize(), _literal_ok)
    if found:
        raise CelError("\n".join(found))
    returned = program.return_type()
    if want_string and returned not in (cel.Type.STRING, cel.Type.DYN):
        raise CelError(f"must evaluate to string but got {returned.name().lower()}")
    return program


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
            result = program.eval(
                data={"authorizer": AUTHORIZER, **self.inputs, "variables": dict(self._done)}
            )
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
