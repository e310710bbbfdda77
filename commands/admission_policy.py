"""`gpu-admission admission-policy`: the admission policies kube-apiserver runs itself, with their
bindings, for a config: the stateless pod and workload checks (ValidatingAdmissionPolicies, two
of each when gpu-env-guard and shared-gpu-limit have different modes), GPU visibility (a
MutatingAdmissionPolicy; in audit mode a ValidatingAdmissionPolicy that records), and the two
guards of ServiceAccount-bound credentials' routing.

The default manifests carry them for the default configuration (manifests/base/
admission-policy.yaml). A cluster whose config changes the GPU resource names, the shared
suffixes, the guarded env names, the annotation prefix or a policy's mode applies this command's
output instead, so that what the API server runs matches what the service runs.
`--webhook-condition` prints, instead, the CEL of the pods validating webhook's matchCondition
for that config (the pods the policy cannot judge alone), and `--mutating-webhooks` the
namespaceSelector and matchConditions of the pods mutating webhook's two entries (the pods that
need cluster state), to put in place of those in manifests/base/webhooks.yaml.
`--webhook-configurations` prints both webhook configurations whole (without caBundle, which the
service or cert-manager writes), and `--layout` the objects of an overlay for older API servers
(webhook-pod-mutations for 1.30 to 1.35, webhook-pod-checks before 1.30). What the controller's
self-check expects is exactly this output (webhooks/apiserver_policies/install_expectation.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

import yaml

from gpu_admission.admission.installed import MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS
from gpu_admission.config.install import InstallLayout
from gpu_admission.config.model import Config, ConfigError, load_config
from webhooks.apiserver_policies.install_expectation import LAYOUT_NAMES, expected_objects
from webhooks.apiserver_policies.webhook_configurations import Layout
from webhooks.apiserver_policies.webhook_routing import mutating_pod_webhooks, webhook_condition

EXIT_OK, EXIT_USAGE = 0, 2
HEADER = """\
# What kube-apiserver (1.36 and later) runs itself, with no webhook call, so that pods that need
# no cluster state are admitted while the service is down: the stateless pod checks (at most one
# time-sliced GPU per container; a GPU container may not set the env names the device plugin
# owns, nor a GPU-sharing scheduler's pod take GPUs its scheduler did not give it) on pods and on
# the pod templates of workloads (ValidatingAdmissionPolicies), GPU visibility
# (NVIDIA_VISIBLE_DEVICES=none, or gpu.hidden_value, for every container that asks for no GPU: a
# MutatingAdmissionPolicy), the guard of the ConfigMaps GPU-sharing schedulers give GPUs through,
# and the guards of ServiceAccount-bound credentials' routing (a binding only in a namespace
# labelled gpu-admission.io/serviceaccount-credentials=true, which stays labelled). Generated
# from the configuration by `gpu-admission admission-policy [--config FILE]`; regenerate it when
# a gpu.* setting, workloads.extra_kinds, the annotation prefix, the exempt namespace label, or a
# policy's mode (policies.<name>.mode) changes.
"""


class _Dumper(yaml.SafeDumper):
    """Long CEL as folded blocks (`>-`), one readable paragraph per expression."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = ">" if len(value) > 60 else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


WEBHOOK_KINDS = (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS)


def layout_for(config: Config, named: str | None) -> Layout:
    """`--layout` if given, else the one the configuration declares (a layout component's
    layer writes `install.layout`), else the base's: the in-pod command on an older server
    prints what that server accepts."""
    if named is not None:
        return LAYOUT_NAMES[named]
    declared = config.install.layout
    return Layout.BASE if declared is InstallLayout.AUTO else LAYOUT_NAMES[str(declared)]


def write_admission_policy(
    config_path: Path | None,
    out: TextIO,
    layout: Layout | None = None,
    webhook_configurations: bool = False,
) -> None:
    config = load_config(config_path)
    layout = layout_for(config, None) if layout is None else layout
    expected = [e.obj for e in expected_objects(config, layout)]
    if webhook_configurations:
        objects = [o for o in expected if o["kind"] in WEBHOOK_KINDS]
    else:
        out.write(HEADER)
        objects = [o for o in expected if o["kind"] not in WEBHOOK_KINDS]
    # Every document opens with `---`: two outputs written one after the other stay apart.
    yaml.dump_all(objects, out, Dumper=_Dumper, sort_keys=False, width=96, explicit_start=True)


def admission_policy_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        if args.webhook_condition:
            out.write(webhook_condition(load_config(args.config).gpu) + "\n")
        elif args.mutating_webhooks:
            entries = mutating_pod_webhooks(load_config(args.config))
            yaml.dump(entries, out, Dumper=_Dumper, sort_keys=False, width=96)
        else:
            config = load_config(args.config)
            layout = layout_for(config, args.layout)
            write_admission_policy(args.config, out, layout, args.webhook_configurations)
    except ConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_USAGE
    return EXIT_OK


def add_admission_policy_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "admission-policy",
        help="print the admission policies kube-apiserver runs itself, for a configuration",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", type=Path, metavar="FILE", help="gpu-admission config file")
    parser.add_argument(
        "--webhook-condition",
        action="store_true",
        help="print the pods validating webhook's matchCondition (CEL) for the config instead",
    )
    parser.add_argument(
        "--mutating-webhooks",
        action="store_true",
        help="print the pods mutating webhook's entries' namespaceSelector and matchConditions "
        "for the config instead",
    )
    parser.add_argument(
        "--webhook-configurations",
        action="store_true",
        help="print the two webhook configurations whole, for the config and layout, instead",
    )
    parser.add_argument(
        "--layout",
        choices=sorted(LAYOUT_NAMES),
        default=None,
        help="the kustomization the API server calls for: base (1.36 and later), "
        "webhook-pod-mutations (1.30 to 1.35), webhook-pod-checks (before 1.30); default: "
        "the configuration's install.layout (a layout component sets it), else base",
    )
    parser.set_defaults(func=admission_policy_command)
