"""Node selection: nodeName, nodeSelector and required node affinity, with Kubernetes' semantics."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_admission.cluster.view import NodeInfo, StaticClusterView
from tests.webhooks.policy_helpers import load_fixture
from webhooks.policies.node_match import Placement, parse_int64

NODE = NodeInfo(
    "gpu-1",
    labels={"zone": "a", "gpus": "4", "word": "four", "empty": ""},
)


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        e["values"] = list(values)
    return e


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    }


def one_expression(e: dict[str, Any]) -> dict[str, Any]:
    return affinity({"matchExpressions": [e]})


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        (expr("zone", "In", "a", "b"), True),
        (expr("zone", "In", "b"), False),
        (expr("missing", "In", "a"), False),
        (expr("zone", "NotIn", "b"), True),
        (expr("zone", "NotIn", "a"), False),
        (expr("missing", "NotIn", "a"), True),  # absent label: NotIn matches
        (expr("zone", "Exists"), True),
        (expr("empty", "Exists"), True),
        (expr("missing", "Exists"), False),
        (expr("missing", "DoesNotExist"), True),  # absent label: DoesNotExist matches
        (expr("zone", "DoesNotExist"), False),
        (expr("gpus", "Gt", "3"), True),
        (expr("gpus", "Gt", "4"), False),
        (expr("gpus", "Lt", "5"), True),
        (expr("gpus", "Lt", "4"), False),
        (expr("gpus", "Gt", "+3"), True),
        (expr("gpus", "Gt", "-1"), True),
        (expr("word", "Gt", "1"), False),  # non-integer label: no match
        (expr("word", "Lt", "1"), False),
        (expr("missing", "Lt", "10"), False),  # Gt/Lt need the label
        (expr("gpus", "Gt", "three"), False),  # non-integer value: invalid, no match
        (expr("gpus", "Gt", "1", "2"), False),  # Gt takes exactly one value
        (expr("gpus", "Gt"), False),
        (expr("gpus", "Gt", "99999999999999999999"), False),  # beyond int64
        (expr("zone", "In"), False),  # In needs values
        (expr("missing", "NotIn"), False),  # NotIn needs values even when the label is absent
        (expr("zone", "Exists", "a"), False),  # Exists takes no values
        (expr("zone", "Near", "a"), False),  # unknown operator
    ],
)
def test_each_operator(requirement: dict[str, Any], matches: bool) -> None:
    assert Placement.of(one_expression(requirement)).admits(NODE) is matches


@pytest.mark.parametrize(
    ("spec", "matches"),
    [
        ({}, True),
        ({"nodeSelector": {"zone": "a"}}, True),
        ({"nodeSelector": {"zone": "b"}}, False),
        ({"nodeSelector": {"missing": ""}}, False),  # the key must exist
        ({"nodeSelector": {"empty": ""}}, True),
        ({"nodeSelector": None, "affinity": None}, True),
        ({"affinity": {"nodeAffinity": None}}, True),
        (
            {
                "affinity": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": None}
                }
            },
            True,
        ),
        # Expressions within a term are ANDed.
        (affinity({"matchExpressions": [expr("zone", "In", "a"), expr("gpus", "Gt", "8")]}), False),
        # Terms are ORed.
        (
            affinity(
                {"matchExpressions": [expr("gpus", "Gt", "8")]},
                {"matchExpressions": [expr("zone", "In", "a")]},
            ),
            True,
        ),
        # A malformed term matches nothing, but the other terms still count.
        (
            affinity(
                {"matchExpressions": [expr("zone", "In")]},
                {"matchExpressions": [expr("zone", "Exists")]},
            ),
            True,
        ),
        (affinity({}), False),  # an empty term matches nothing
        (affinity({"matchExpressions": []}), False),
        (affinity(), False),  # no terms at all: nothing
        (affinity({"matchFields": [expr("metadata.name", "In", "gpu-1")]}), True),
        (affinity({"matchFields": [expr("metadata.name", "In", "gpu-2")]}), False),
        (affinity({"matchFields": [expr("metadata.name", "NotIn", "gpu-2")]}), True),
        (affinity({"matchFields": [expr("metadata.name", "In", "gpu-1", "gpu-2")]}), False),
        (affinity({"matchFields": [expr("metadata.name", "Exists")]}), False),
        (
            affinity(
                {
                    "matchFields": [expr("metadata.name", "In", "gpu-1")],
                    "matchExpressions": [expr("zone", "In", "b")],
                }
            ),
            False,
        ),
        # nodeSelector and affinity must both hold.
        (
            {
                **affinity({"matchExpressions": [expr("zone", "Exists")]}),
                "nodeSelector": {"zone": "b"},
            },
            False,
        ),
        # Preferred affinity never restricts.
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 1,
                                "preference": {"matchExpressions": [expr("zone", "In", "b")]},
                            }
                        ]
                    }
                }
            },
            True,
        ),
    ],
)
def test_selector_and_terms(spec: dict[str, Any], matches: bool) -> None:
    assert Placement.of(spec).admits(NODE) is matches


def _nodes() -> list[NodeInfo]:
    base = {"kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "g5.xlarge"}
    return [
        NodeInfo(
            "a",
            {**base, "topology.kubernetes.io/zone": "us-east-1a", "nvidia.com/gpu.present": "true"},
        ),
        NodeInfo(
            "b",
            {**base, "topology.kubernetes.io/zone": "us-east-1b", "nvidia.com/gpu.present": "true"},
        ),
        NodeInfo(
            "c",
            {**base, "topology.kubernetes.io/zone": "us-east-1c", "nvidia.com/gpu.present": "true"},
        ),
        NodeInfo("no-gpu-label", {**base, "topology.kubernetes.io/zone": "us-east-1a"}),
        NodeInfo(
            "other-type", {"kubernetes.io/os": "linux", "topology.kubernetes.io/zone": "us-east-1a"}
        ),
    ]


def test_real_affinity_fixture_picks_the_zones_and_types_it_names() -> None:
    spec = load_fixture("pod-node-selector-affinity.mutating.json")["request"]["object"]["spec"]
    view = StaticClusterView(nodes=_nodes())
    assert sorted(n.name for n in Placement.of(spec).candidates(view)) == ["a", "b"]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"nodeName": "c"}, ["c"]),
        ({"nodeName": "gone"}, []),
        # The kubelet refuses a pinned pod whose selector its node does not satisfy.
        ({"nodeName": "c", "nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"}}, []),
        (
            {"nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"}},
            ["a", "no-gpu-label", "other-type"],
        ),
    ],
)
def test_node_name_and_selector_candidates(spec: dict[str, Any], expected: list[str]) -> None:
    view = StaticClusterView(nodes=_nodes())
    assert sorted(n.name for n in Placement.of(spec).candidates(view)) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("5", 5),
        ("-5", -5),
        ("+5", 5),
        ("05", 5),
        ("5.0", None),
        (" 5", None),
        ("1_0", None),
        ("", None),
        (5, None),
    ],
)
def test_parse_int64_is_go_strict(raw: object, expected: int | None) -> None:
    assert parse_int64(raw) == expected
