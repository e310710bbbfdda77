"""Patch: every recorded operation applies, in order, to the object as sent and reproduces the
working object; helpers record nothing when the object is already as wanted."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhooks.core.patch import Patch, PatchConflict, escape


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "containers": [
                {"name": "main", "image": "cuda"},
                {"name": "side", "image": "busybox", "env": [{"name": "A", "value": "1"}]},
            ]
        },
    }


def assert_reproduces(original: dict[str, Any], patch: Patch) -> None:
    assert jsonpatch.apply_patch(copy.deepcopy(original), patch.ops) == patch.obj


def test_escape_follows_json_pointer():
    assert escape("gpu-admission.io/data~load") == "gpu-admission.io~1data~0load"


def test_annotation_with_a_slash_creates_the_map_and_escapes_the_key():
    original = pod()
    patch = Patch(copy.deepcopy(original))
    patch.set_annotation("gpu-admission.io/gpu-replicas", "4")
    assert patch.ops == [
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/metadata/annotations/gpu-admission.io~1gpu-replicas", "value": "4"},
    ]
    assert_reproduces(original, patch)


def test_map_entries_are_replaced_only_when_different():
    original = pod()
    original["metadata"]["labels"] = {"team": "vision"}
    patch = Patch(copy.deepcopy(original))
    patch.set_label("team", "vision")
    assert patch.ops == []
    patch.set_label("team", "nlp")
    assert patch.ops == [{"op": "replace", "path": "/metadata/labels/team", "value": "nlp"}]
    assert_reproduces(original, patch)


def test_null_map_is_replaced_by_an_object():
    original = pod()
    original["metadata"]["annotations"] = None
    patch = Patch(copy.deepcopy(original))
    patch.set_annotation("a", "b")
    assert patch.obj["metadata"]["annotations"] == {"a": "b"}
    assert_reproduces(original, patch)


def test_append_creates_a_missing_or_null_list_then_appends():
    original = pod()
    original["spec"]["schedulingGates"] = None
    patch = Patch(copy.deepcopy(original))
    patch.append("/spec/schedulingGates", {"name": "one"})
    patch.append("/spec/schedulingGates", {"name": "two"})
    patch.append("/spec/tolerations", {"key": "gpu"})
    assert [op["op"] for op in patch.ops] == ["replace", "add", "add"]
    assert patch.obj["spec"]["schedulingGates"] == [{"name": "one"}, {"name": "two"}]
    assert_reproduces(original, patch)


def test_set_env_appends_replaces_and_collapses_duplicates():
    original = pod()
    original["spec"]["containers"][1]["env"] += [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "B", "value": "2"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"},
    ]
    patch = Patch(copy.deepcopy(original))
    wanted = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
    patch.set_env("/spec/containers/0", wanted)
    patch.set_env("/spec/containers/1", wanted)
    assert patch.obj["spec"]["containers"][0]["env"] == [wanted]
    assert patch.obj["spec"]["containers"][1]["env"] == [
        {"name": "A", "value": "1"},
        wanted,
        {"name": "B", "value": "2"},
    ]
    assert_reproduces(original, patch)
    again = Patch(patch.obj)
    again.set_env("/spec/containers/0", wanted)
    again.set_env("/spec/containers/1", wanted)
    assert again.ops == []


def test_recorded_values_are_detached_from_the_working_object():
    original = pod()
    patch = Patch(copy.deepcopy(original))
    patch.add("/spec/volumes", [])
    patch.add("/spec/volumes/-", {"name": "data"})
    patch.add("/spec/volumes/0/secret", {"secretName": "s"})
    # The first op recorded an empty list and the second a bare volume; later changes to the
    # working object must not show up in them.
    assert patch.ops[0]["value"] == []
    assert patch.ops[1]["value"] == {"name": "data"}
    assert_reproduces(original, patch)


def test_remove_and_replace_record_and_apply():
    original = pod()
    patch = Patch(copy.deepcopy(original))
    patch.replace("/spec/containers/0/image", "cuda:12")
    patch.remove("/spec/containers/1/env/0")
    assert patch.get("/spec/containers/0/image") == "cuda:12"
    assert_reproduces(original, patch)


@pytest.mark.parametrize(
    ("operation", "path"),
    [
        ("replace", "/spec/missing"),
        ("remove", "/metadata/annotations/x"),
        ("add", "/spec/nothing/here"),
        ("get", "/spec/containers/9"),
    ],
)
def test_impossible_operations_raise_patch_conflict(operation, path):
    patch = Patch(pod())
    with pytest.raises(PatchConflict):
        if operation == "replace":
            patch.replace(path, 1)
        elif operation == "remove":
            patch.remove(path)
        elif operation == "add":
            patch.add(path, 1)
        else:
            patch.get(path)
    assert patch.ops == []


KEYS = st.text(alphabet="ab/~.-", min_size=1, max_size=6)
ENV_NAMES = st.sampled_from(["A", "B", "NVIDIA_VISIBLE_DEVICES"])
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("annotation"), KEYS, st.text(max_size=3)),
        st.tuples(st.just("label"), KEYS, st.text(max_size=3)),
        st.tuples(st.just("env"), st.integers(0, 1), ENV_NAMES, st.text(max_size=3)),
        st.tuples(st.just("gate"), KEYS),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(ACTIONS)
def test_any_sequence_of_helper_calls_reproduces_the_working_object(actions):
    original = pod()
    patch = Patch(copy.deepcopy(original))
    for action in actions:
        if action[0] == "annotation":
            patch.set_annotation(action[1], action[2])
        elif action[0] == "label":
            patch.set_label(action[1], action[2])
        elif action[0] == "env":
            patch.set_env(f"/spec/containers/{action[1]}", {"name": action[2], "value": action[3]})
        else:
            patch.append("/spec/schedulingGates", {"name": action[1]})
    assert_reproduces(original, patch)
