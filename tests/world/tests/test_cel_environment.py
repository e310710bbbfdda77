"""The world's CEL environment against what kube-apiserver 1.36.2 compiled and refused.

`tests/world/fixtures/cel/compile.json` was recorded from the real server (a copy of
shared/fixtures/cel/): 44 expressions placed in a ValidatingAdmissionPolicy, each accepted or
refused. The emulator must give every one the same verdict, or a policy that no real server
accepts would pass the suite (as one with `cel.bind` once did).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.world.kubeapi.admission_policy import policy_causes

FIXTURE = Path(__file__).parents[1] / "fixtures" / "cel" / "compile.json"
CASES: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["results"]


def _policy(case: dict[str, Any]) -> dict[str, Any]:
    expression = case["expression"]
    spec: dict[str, Any] = {"validations": [{"expression": "true"}]}
    if case["where"] == "validation":
        spec["validations"] = [{"expression": expression}]
    elif case["where"] == "variable":
        spec["variables"] = [{"name": "v", "expression": expression}]
    elif case["where"] == "messageExpression":
        spec["validations"] = [{"expression": "true", "messageExpression": expression}]
    elif case["where"] == "matchCondition":
        spec["matchConditions"] = [{"name": "c", "expression": expression}]
    else:
        raise AssertionError(f"unknown place {case['where']}")
    return {"metadata": {"name": "p"}, "spec": spec}


def test_the_fixture_is_the_real_servers() -> None:
    assert json.loads(FIXTURE.read_text())["server"] == "v1.36.2"
    assert len(CASES) == 44
    assert {c["accepted"] for c in CASES} == {True, False}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_world_compiles_as_the_real_server_does(case: dict[str, Any]) -> None:
    causes = policy_causes(_policy(case))
    if case["accepted"]:
        assert causes == [], causes
    else:
        assert causes, f"the real server refused {case['expression']!r}: {case['error']}"
        # The same complaint as the real server's, where it names one.
        # (A function the real environment declares for other types only, such as sign(), is
        # "no matching overload" there and may be "undeclared" here.)
        real = case["error"]
        words = {
            "undeclared reference": ("undeclared reference",),
            "no matching overload": ("no matching overload", "undeclared reference"),
            "expected type": ("expected type",),
            "invalid matches argument": ("invalid matches argument",),
            "invalid duration argument": ("invalid duration argument",),
            "must evaluate to string": ("must evaluate to string",),
        }
        for word, ours in words.items():
            if word in real:
                assert any(w in c["message"] for c in causes for w in ours), causes
