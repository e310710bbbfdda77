"""`gpu-admission admission-policy`: the ValidatingAdmissionPolicy and binding for a config (two
of each when gpu-env-guard and shared-gpu-limit have different modes).

The default manifests carry them for the default configuration (manifests/base/
admission-policy.yaml). A cluster whose config changes the GPU resource names, the shared
suffixes or the guarded env names applies this command's output instead, so that the checks the
API server runs match the ones the service runs. `--webhook-condition` prints, instead, the CEL
of the pods validating webhook's matchCondition for that config (the pods the policy cannot judge
alone), to put in place of the one in manifests/base/webhooks.yaml.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

import yaml

from gpu_admission.config import ConfigError, load_config
from webhooks.apiserver_policies.bindings import admission_policy_objects
from webhooks.apiserver_policies.webhook_routing import webhook_condition

EXIT_OK, EXIT_USAGE = 0, 2
HEADER = """\
# The stateless pod checks (at most one time-sliced GPU per container; a GPU container may not
# set the env names the device plugin owns) as ValidatingAdmissionPolicies: kube-apiserver
# (1.30 and later) runs them itself, with no webhook call, on pods and on the pod templates of
# workloads (Deployments, Jobs, JobSets, ...). Generated from the configuration by
# `gpu-admission admission-policy [--config FILE]`; regenerate it when gpu.resource_patterns,
# gpu.shared_suffixes, gpu.guarded_env, workloads.extra_kinds, the exempt namespace label, or
# the modes of gpu-env-guard and shared-gpu-limit (policies.<name>.mode) change.
"""


class _Dumper(yaml.SafeDumper):
    """Long CEL as folded blocks (`>-`), one readable paragraph per expression."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = ">" if len(value) > 60 else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def write_admission_policy(config_path: Path | None, out: TextIO) -> None:
    config = load_config(config_path)
    out.write(HEADER)
    objects = admission_policy_objects(config)
    yaml.dump_all(objects, out, Dumper=_Dumper, sort_keys=False, width=96)


def admission_policy_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        if args.webhook_condition:
            out.write(webhook_condition(load_config(args.config).gpu) + "\n")
        else:
            write_admission_policy(args.config, out)
    except ConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_USAGE
    return EXIT_OK


def add_admission_policy_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "admission-policy",
        help="print the ValidatingAdmissionPolicy and binding for a configuration",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", type=Path, metavar="FILE", help="gpu-admission config file")
    parser.add_argument(
        "--webhook-condition",
        action="store_true",
        help="print the pods validating webhook's matchCondition (CEL) for the config instead",
    )
    parser.set_defaults(func=admission_policy_command)
