"""`gpu-admission review` of workloads: refused in the words the cluster uses (the workload
policy's, or the workloads webhook's under `--pod-checks webhook`), warned about what depends
on cluster state, and printed with each template as its pods will get it."""

from __future__ import annotations

import io
import sys

import yaml

from commands.cli import main
from gpu_admission.config.model import Config
from webhooks.apiserver_policies.pod_checks import denial_text
from webhooks.apiserver_policies.workload_templates import WORKLOAD_POLICY_NAME, workload_denial
from webhooks.core.workload_kinds import BUILT_IN

JOBSET = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: pretrain, namespace: ml}
spec:
  replicatedJobs:
  - name: workers
    template:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: trainer
              image: cuda
              resources: {limits: {nvidia.com/gpu.shared: 2}}
"""
CPU_CRONJOB = """
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: ml}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: batch, image: python}]
"""


def review(*argv: str, stdin: str) -> tuple[int, list[dict], str]:
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
    try:
        code = main(["review", "-f", "-", *argv])
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    return code, [d for d in yaml.safe_load_all(out.getvalue()) if d], err.getvalue()


def test_a_refused_jobset_is_worded_as_the_workload_policy_words_it() -> None:
    code, printed, err = review(stdin=JOBSET)
    assert code == 1 and printed == []
    jobset = next(k for k in BUILT_IN if k.kind == "JobSet")
    message = workload_denial(yaml.safe_load(JOBSET), jobset, Config())
    assert message is not None
    assert " ".join(denial_text(message, WORKLOAD_POLICY_NAME).split()) in " ".join(err.split())


def test_under_the_webhook_overlay_the_webhook_words_it() -> None:
    code, _, err = review("--pod-checks", "webhook", stdin=JOBSET)
    assert code == 1
    assert "ValidatingAdmissionPolicy" not in err
    assert 'JobSet "pretrain": container "trainer" asks for 2 of nvidia.com/gpu.shared' in err


def test_a_good_workload_is_printed_as_its_pods_will_be() -> None:
    code, [cronjob], err = review(stdin=CPU_CRONJOB)
    assert code == 0, err
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in container["env"]


def test_a_template_no_pod_could_be_made_of_is_refused_naming_the_field() -> None:
    broken = CPU_CRONJOB.replace("[{name: batch, image: python}]", "{name: batch}")
    code, printed, err = review(stdin=broken)
    assert code == 1 and printed == []
    assert (
        "not a valid CronJob: spec.jobTemplate.spec.template.spec.containers: expected a list"
    ) in err
    assert "internal error" not in err
