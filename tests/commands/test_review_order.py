"""`gpu-admission review` takes its input as `kubectl apply -f` would: an object earlier in the
input exists for the objects after it, and only if it was admitted."""

from __future__ import annotations

import io
import sys

import pytest
import yaml

from commands.cli import main
from gpu_admission.config.model import Config
from webhooks.dispatch.workload_checks import STATE_DEPENDENT

SECRET = """
apiVersion: v1
kind: Secret
metadata: {name: s3-reader, namespace: ml}
type: aws-credential
stringData:
  AWS_ACCESS_KEY_ID: AKIAIOSFODNN7EXAMPLE
  AWS_SECRET_ACCESS_KEY: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY
"""
# The required secret key misspelt: refused, so never created.
BAD_SECRET = SECRET.replace("AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY")
DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer, namespace: ml}
spec:
  selector: {matchLabels: {app: trainer}}
  template:
    metadata:
      labels: {app: trainer}
      annotations: {gpu-admission.io/cloud-credentials: s3-reader}
    spec:
      containers: [{name: app, image: python:3.12}]
"""
SERVICE_ACCOUNT = """
apiVersion: v1
kind: ServiceAccount
metadata:
  name: reader
  namespace: ml
  annotations: {gpu-admission.io/cloud-credentials: s3-reader}
"""
SA_POD = """
apiVersion: v1
kind: Pod
metadata: {name: uses-sa, namespace: ml}
spec:
  serviceAccountName: reader
  containers: [{name: app, image: python:3.12}]
"""
MISSING = 'Secret "s3-reader" (named by the pod annotation'


def review(*documents: str, argv: tuple[str, ...] = ()) -> tuple[int, list[dict], str]:
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO("---\n".join(documents)), out, err
    try:
        code = main(["review", "-f", "-", *argv])
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    return code, [d for d in yaml.safe_load_all(out.getvalue()) if d], err.getvalue()


def env_names(printed: list[dict], kind: str) -> set[str]:
    obj = next(o for o in printed if o["kind"] == kind)
    spec = obj["spec"]["template"]["spec"] if kind == "Deployment" else obj["spec"]
    return {e["name"] for e in spec["containers"][0].get("env") or []}


def test_a_secret_before_its_user_exists_for_it() -> None:
    code, printed, err = review(SECRET, DEPLOYMENT)
    assert code == 0, err
    assert MISSING not in err
    assert "AWS_ACCESS_KEY_ID" in env_names(printed, "Deployment")  # the template got them


def test_a_secret_after_its_user_does_not_exist_yet() -> None:
    # As the API server would: the Deployment is admitted with a warning (its pods, made
    # later, may find the Secret), and the Secret after it is there for those pods.
    code, _, err = review(DEPLOYMENT, SECRET)
    assert code == 0, err
    assert MISSING in err and "does not exist" in err
    assert f'Deployment "trainer": {STATE_DEPENDENT}' in err


def test_a_refused_secret_is_never_created() -> None:
    code, _, err = review(BAD_SECRET, DEPLOYMENT)
    assert code == 1
    assert MISSING in err and "does not exist" in err
    assert "wJalrXUtnFEMI" not in err


LABELLED = f"""
apiVersion: v1
kind: Namespace
metadata:
  name: ml
  labels: {{{Config().names.serviceaccount_credentials_label}: "true"}}
"""


def test_a_service_account_before_its_pods_binds_them_to_its_credentials() -> None:
    code, printed, err = review(LABELLED, SECRET, SERVICE_ACCOUNT, SA_POD)
    assert code == 0, err
    assert "AWS_ACCESS_KEY_ID" in env_names(printed, "Pod")  # the ServiceAccount's credentials
    code, printed, err = review(LABELLED, SECRET, SA_POD, SERVICE_ACCOUNT)
    assert code == 0, err
    assert "AWS_ACCESS_KEY_ID" not in env_names(printed, "Pod")  # no ServiceAccount yet


def test_a_binding_where_no_label_routes_its_pods_is_refused_in_the_policys_words() -> None:
    code, printed, err = review(SECRET, SERVICE_ACCOUNT, SA_POD)
    assert code == 1
    said = " ".join(err.split())
    assert (
        "ValidatingAdmissionPolicy 'gpu-admission-serviceaccount-credentials' with binding "
        "'gpu-admission-serviceaccount-credentials' denied request: ServiceAccount \"reader\" "
        "names cloud credentials"
    ) in said
    assert "kubectl label namespace ml gpu-admission.io/serviceaccount-credentials=true" in said
    assert "AWS_ACCESS_KEY_ID" not in env_names(printed, "Pod")  # it was never created
    # Where the webhook sees every pod (API servers before 1.36), no label is needed.
    code, printed, err = review(
        SECRET, SERVICE_ACCOUNT, SA_POD, argv=("--pod-mutations", "webhook")
    )
    assert code == 0, err
    assert "AWS_ACCESS_KEY_ID" in env_names(printed, "Pod")


def test_a_namespace_before_its_pods_exempts_them() -> None:
    namespace = f"""
apiVersion: v1
kind: Namespace
metadata:
  name: ml
  labels: {{{Config().exempt_label}: "true"}}
"""
    code, _, err = review(namespace, DEPLOYMENT)
    assert code == 0, err
    assert "namespace ml is exempt" in err


KAI_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: fraction
  namespace: ml
  annotations: {gpu-fraction: "0.5", runai/shared-gpu-configmap: fraction-x7k2p9q-shared-gpu}
spec:
  schedulerName: SCHEDULER
  containers:
    - name: main
      image: nvidia/cuda:13.0.2-base-ubi8
      env:
        - name: NVIDIA_VISIBLE_DEVICES
          valueFrom:
            configMapKeyRef: {name: fraction-x7k2p9q-shared-gpu-0, key: NVIDIA_VISIBLE_DEVICES}
"""


@pytest.mark.parametrize(
    ("scheduler", "kept"), [("kai-scheduler", True), ("default-scheduler", False)]
)
def test_review_keeps_a_kai_fractions_visibility_and_hides_the_same_pod_otherwise(
    scheduler: str, kept: bool
) -> None:
    code, printed, _ = review(KAI_POD.replace("SCHEDULER", scheduler))
    assert code == 0
    [env] = printed[0]["spec"]["containers"][0]["env"]
    assert ("valueFrom" in env) is kept
    assert kept or env == {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
