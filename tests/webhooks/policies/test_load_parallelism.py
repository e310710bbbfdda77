"""Loader shards per dataset PVC: the pure rule, and the PVC webhook refusing what breaks it."""

from __future__ import annotations

import pytest

from gpu_admission.config.model import Config
from gpu_admission.datasets.parallelism import load_parallelism
from tests.webhooks.policies.test_dataset_pvc import (
    VIEW,
    fixture_request,
    validate,
    with_annotations,
)
from webhooks.policies.dataset_pvc import policies
from webhooks.policies.interface import ValidatingPolicy

KEY = "gpu-admission.io/data-load-parallelism"
RWX, RWO = ["ReadWriteMany"], ["ReadWriteOnce"]


@pytest.mark.parametrize(
    ("annotation", "modes", "default", "shards"),
    [
        (None, RWX, 1, 1),
        (None, RWX, 4, 4),
        (None, RWO, 4, 1),  # the default applies only where several writers can share
        ("4", RWX, 1, 4),
        (" 8 ", RWX, 1, 8),
        ("1", RWO, 1, 1),
        ("16", ["ReadWriteOnce", "ReadWriteMany"], 1, 16),
    ],
)
def test_shards(annotation, modes, default, shards):
    annotations = {} if annotation is None else {KEY: annotation}
    result = load_parallelism(annotations, modes, KEY, default, 16)
    assert (result.shards, result.error) == (shards, None)


@pytest.mark.parametrize(
    ("annotation", "modes", "words"),
    [
        ("four", RWX, "'four' is not a whole number of loader shards"),
        ("0", RWX, "set it to a number from 1 to 16"),
        ("-2", RWX, "not a whole number"),
        ("2.5", RWX, "not a whole number"),
        ("17", RWX, "17 shards is more than the 16 this cluster allows"),
        ("4", RWO, "only a ReadWriteMany volume allows, but this PVC's accessModes are "),
        ("2", [], "accessModes are [none]"),
    ],
)
def test_errors_say_what_to_do(annotation, modes, words):
    result = load_parallelism({KEY: annotation}, modes, KEY, 1, 16)
    assert result.error is not None and words in result.error
    assert result.error.startswith(KEY)


def test_webhook_refuses_four_shards_on_a_read_write_once_pvc():
    request = with_annotations(
        fixture_request("pvc-dataset.validating.json"), **{"data_load_parallelism": "4"}
    )
    assert validate(request).allowed  # the fixture PVC is ReadWriteMany
    request.object["spec"]["accessModes"] = ["ReadWriteOnce"]
    verdict = validate(request)
    assert not verdict.allowed
    assert "4 loader shards" in verdict.message and "[ReadWriteOnce]" in verdict.message


def test_webhook_uses_the_configured_maximum():
    config = Config.model_validate({"dataset": {"max_parallelism": 2}})
    policy = next(p for p in policies(config) if isinstance(p, ValidatingPolicy))
    request = with_annotations(
        fixture_request("pvc-dataset.validating.json"), **{"data_load_parallelism": "3"}
    )
    verdict = policy.validate(request, VIEW)
    assert not verdict.allowed and "more than the 2 this cluster allows" in verdict.message
