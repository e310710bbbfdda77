"""Kubernetes' own CEL libraries (``staging/src/k8s.io/apiserver/pkg/cel/library/``), in Python.

kube-apiserver 1.36 declares, besides cel-go's extensions, these libraries in its base
environment (``pkg/cel/environment/base.go``): quantity, lists, regex, URLs, IP and CIDR,
format, semver and authorizer. The runtime here (cel-expr-python) cannot hold an opaque type
made in Python, so each value of a Kubernetes type travels as a one-key map (``{"@quantity":
"1Gi"}``); expressions only ever see it through these functions.

What the real server refuses is left out on purpose: ``quantity.sign()`` (refused by 1.36, see
tests/world/fixtures/cel/compile.json). Known gaps: regular expressions run on Python's ``re``
(RE2 differs in corners such as possessive quantifiers); the authorizer allows everything, as
the emulator authorizes every request.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any
from urllib.parse import urlsplit

from cel_expr_python import cel

from tests.world.kubeapi import quantity as q

QUANTITY_KEY = "@quantity"
D, B, I, S, F = cel.Type.DYN, cel.Type.BOOL, cel.Type.INT, cel.Type.STRING, cel.Type.DOUBLE  # noqa: E741
L = cel.Type.List(cel.Type.DYN)


class CelLibraryError(Exception):
    """An error a library function raises, as the runtime reports it."""


def _fn(
    name: str, overload: str, result: Any, params: list[Any], member: bool, impl: Callable[..., Any]
) -> cel.FunctionDecl:
    return cel.FunctionDecl(
        name, [cel.Overload(overload, result, params, is_member=member, impl=impl)]
    )


def _boxed(kind: str, arg: Any) -> str:
    key = f"@{kind}"
    if isinstance(arg, Mapping) and key in arg:
        return str(arg[key])
    raise CelLibraryError("no such overload")


# -- quantity (library/quantity.go) ----------------------------------------------------------


def quantity_value(arg: Any) -> Fraction:
    return q.parse(_boxed("quantity", arg))


def _quantity(text: str) -> dict[str, str]:
    q.parse(text)  # raises on a bad quantity, as quantity() does
    return {QUANTITY_KEY: text}


def _from_fraction(value: Fraction) -> dict[str, str]:
    if value.denominator == 1:
        return {QUANTITY_KEY: str(value.numerator)}
    return {QUANTITY_KEY: f"{int(value * 10**9)}n"}


def _as_integer(arg: Any) -> int:
    value = q.as_int64(quantity_value(arg))
    if value is None:
        raise CelLibraryError("cannot convert value to integer")
    return value


def _cmp(a: Any, b: Any) -> int:
    left, right = quantity_value(a), quantity_value(b)
    return (left > right) - (left < right)


def _operand(arg: Any) -> Fraction:
    return Fraction(arg) if isinstance(arg, int) else quantity_value(arg)


_QUANTITY = [
    _fn("quantity", "string_to_quantity", D, [S], False, _quantity),
    _fn("isQuantity", "is_quantity_string", B, [S], False, q.is_quantity),
    _fn(
        "isInteger",
        "quantity_is_integer",
        B,
        [D],
        True,
        lambda a: q.as_int64(quantity_value(a)) is not None,
    ),
    _fn("asInteger", "quantity_get_int", I, [D], True, _as_integer),
    _fn(
        "asApproximateFloat",
        "quantity_get_float",
        F,
        [D],
        True,
        lambda a: float(quantity_value(a)),
    ),
    _fn("compareTo", "quantity_compare_to", I, [D, D], True, _cmp),
    _fn(
        "add",
        "quantity_add",
        D,
        [D, D],
        True,
        lambda a, b: _from_fraction(quantity_value(a) + _operand(b)),
    ),
    _fn(
        "sub",
        "quantity_sub",
        D,
        [D, D],
        True,
        lambda a, b: _from_fraction(quantity_value(a) - _operand(b)),
    ),
]


# -- lists (library/lists.go) ----------------------------------------------------------------


def _comparable(items: list[Any]) -> list[Any]:
    if any(isinstance(x, (dict, list)) for x in items):
        raise CelLibraryError("no such overload")
    return items


def _index_of(items: list[Any], value: Any) -> int:
    return next((i for i, x in enumerate(items) if x == value), -1)


def _last_index_of(items: list[Any], value: Any) -> int:
    return next((i for i in range(len(items) - 1, -1, -1) if items[i] == value), -1)


def _extreme(items: list[Any], pick: Callable[..., Any]) -> Any:
    if not items:
        raise CelLibraryError(
            "min called on empty list" if pick is min else "max called on empty list"
        )
    return pick(_comparable(items))


_LISTS = [
    _fn(
        "isSorted",
        "list_is_sorted",
        B,
        [L],
        True,
        lambda xs: all(a <= b for a, b in zip(_comparable(xs), xs[1:], strict=False)),
    ),
    _fn("sum", "list_sum", D, [L], True, lambda xs: sum(_comparable(xs))),
    _fn("min", "list_min", D, [L], True, lambda xs: _extreme(xs, min)),
    _fn("max", "list_max", D, [L], True, lambda xs: _extreme(xs, max)),
    _fn("indexOf", "list_index_of", I, [L, D], True, _index_of),
    _fn("lastIndexOf", "list_last_index_of", I, [L, D], True, _last_index_of),
]


# -- regex (library/regex.go) ----------------------------------------------------------------


def _find(text: str, pattern: str) -> str:
    match = re.search(pattern, text)
    return match.group(0) if match else ""


_REGEX = [
    _fn("find", "string_find_string", S, [S, S], True, _find),
    _fn(
        "findAll",
        "string_find_all_string",
        cel.Type.List(S),
        [S, S],
        True,
        lambda text, pattern: [m.group(0) for m in re.finditer(pattern, text)],
    ),
]


# -- URLs (library/urls.go) ------------------------------------------------------------------


def _url(text: str) -> dict[str, str]:
    parts = urlsplit(text)
    if not parts.scheme and not text.startswith("/"):
        raise CelLibraryError(f"URL parse error during conversion from string: {text}")
    return {"@url": text}


def _is_url(text: str) -> bool:
    try:
        _url(text)
    except (CelLibraryError, ValueError):
        return False
    return True


def _url_part(part: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda arg: part(urlsplit(_boxed("url", arg)))


_URLS = [
    _fn("url", "string_to_url", D, [S], False, _url),
    _fn("isURL", "is_url_string", B, [S], False, _is_url),
    _fn("getScheme", "url_get_scheme", S, [D], True, _url_part(lambda u: u.scheme)),
    _fn("getHost", "url_get_host", S, [D], True, _url_part(lambda u: u.netloc.rpartition("@")[2])),
    _fn("getHostname", "url_get_hostname", S, [D], True, _url_part(lambda u: u.hostname or "")),
    _fn("getPort", "url_get_port", S, [D], True, _url_part(lambda u: str(u.port or ""))),
    _fn("getEscapedPath", "url_get_escaped_path", S, [D], True, _url_part(lambda u: u.path)),
]


# -- IP and CIDR (library/ip.go, library/cidr.go) --------------------------------------------


def _ip_value(arg: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(_boxed("ip", arg) if isinstance(arg, Mapping) else arg)


def _cidr_value(arg: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(_boxed("cidr", arg), strict=False)


def _ip(text: str) -> dict[str, str]:
    ipaddress.ip_address(text)
    return {"@ip": text}


def _cidr(text: str) -> dict[str, str]:
    ipaddress.ip_network(text, strict=False)
    return {"@cidr": text}


def _parses(parse: Callable[[str], Any]) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        try:
            parse(text)
        except ValueError:
            return False
        return True

    return check


_IPS = [
    _fn("ip", "string_to_ip", D, [S], False, _ip),
    _fn("isIP", "is_ip", B, [S], False, _parses(ipaddress.ip_address)),
    _fn("family", "ip_family", I, [D], True, lambda a: _ip_value(a).version),
    _fn("isLoopback", "ip_is_loopback", B, [D], True, lambda a: _ip_value(a).is_loopback),
    _fn("cidr", "string_to_cidr", D, [S], False, _cidr),
    _fn(
        "isCIDR", "is_cidr", B, [S], False, _parses(lambda t: ipaddress.ip_network(t, strict=False))
    ),
    _fn(
        "containsIP",
        "cidr_contains_ip",
        B,
        [D, D],
        True,
        lambda c, a: _ip_value(a) in _cidr_value(c),
    ),
    _fn("prefixLength", "cidr_prefix_length", I, [D], True, lambda c: _cidr_value(c).prefixlen),
]


# -- format (library/format.go) --------------------------------------------------------------

# The named formats and the rules behind them (apimachinery's validation helpers).
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_FORMATS: dict[str, Callable[[str], list[str]]] = {
    "dns1123Label": lambda s: (
        []
        if len(s) <= 63 and _DNS1123_LABEL.fullmatch(s)
        else [
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
            "'-', and must start and end with an alphanumeric character"
        ]
    ),
}


def _format(name: str) -> Callable[[], dict[str, str]]:
    return lambda: {"@format": name}


def _validate(arg: Any, text: str) -> Any:
    # The real `validate` answers optional(list(string)); the runtime cannot make an optional
    # from Python, so an expression that uses it compiles as on the real server but does not
    # evaluate here (README: known gaps).
    _FORMATS[_boxed("format", arg)](text)
    raise CelLibraryError("format validate() cannot be evaluated by the test world")


_FORMAT = [
    *(_fn(f"format.{name}", f"format_{name}", D, [], False, _format(name)) for name in _FORMATS),
    _fn("validate", "format_validate", D, [D, S], True, _validate),
]


# -- semver (library/semver.go) --------------------------------------------------------------

_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)


def _semver_key(arg: Any) -> tuple[int, int, int]:
    match = _SEMVER.fullmatch(_boxed("semver", arg))
    if match is None:
        raise CelLibraryError("invalid semver")
    return int(match[1]), int(match[2]), int(match[3])


def _semver(text: str) -> dict[str, str]:
    if _SEMVER.fullmatch(text) is None:
        raise CelLibraryError(f"could not parse semver: {text}")
    return {"@semver": text}


def _semver_cmp(a: Any, b: Any) -> int:
    left, right = _semver_key(a), _semver_key(b)
    return (left > right) - (left < right)


_SEMVERS = [
    _fn("semver", "string_to_semver", D, [S], False, _semver),
    _fn("isSemver", "is_semver", B, [S], False, lambda t: _SEMVER.fullmatch(t) is not None),
    _fn("major", "semver_major", I, [D], True, lambda a: _semver_key(a)[0]),
    _fn("minor", "semver_minor", I, [D], True, lambda a: _semver_key(a)[1]),
    _fn("patch", "semver_patch", I, [D], True, lambda a: _semver_key(a)[2]),
]


def _compare(a: Any, b: Any) -> int:
    """quantity and semver share isGreaterThan/isLessThan; one overload serves both."""
    if isinstance(a, Mapping) and "@semver" in a:
        return _semver_cmp(a, b)
    return _cmp(a, b)


_ORDER = [
    _fn("isGreaterThan", "is_greater_than", B, [D, D], True, lambda a, b: _compare(a, b) > 0),
    _fn("isLessThan", "is_less_than", B, [D, D], True, lambda a, b: _compare(a, b) < 0),
]


# -- authorizer (library/authz.go) -----------------------------------------------------------


def _step(field: str) -> Callable[[Any, str], dict[str, Any]]:
    return lambda check, value: {**check, field: value}


# The emulator authorizes every request (README: known gaps), so every check is allowed.
_AUTHZ = [
    _fn("group", "authorizer_group", D, [D, S], True, _step("group")),
    _fn("resource", "group_check_resource", D, [D, S], True, _step("resource")),
    _fn("namespace", "resource_check_namespace", D, [D, S], True, _step("namespace")),
    _fn("name", "resource_check_name", D, [D, S], True, _step("name")),
    _fn("check", "resource_check_check", D, [D, S], True, lambda c, verb: {**c, "@allowed": True}),
    _fn("allowed", "decision_allowed", B, [D], True, lambda d: bool(d.get("@allowed"))),
]
AUTHORIZER = {"@authorizer": True}

KUBERNETES_LIBRARY = cel.CelExtension(
    "kubernetes",
    [*_QUANTITY, *_LISTS, *_REGEX, *_URLS, *_IPS, *_FORMAT, *_SEMVERS, *_ORDER, *_AUTHZ],
)
