"""Cloud credentials reaching a researcher's pod on a real node, through the installed product:
Secrets made with `kubectl create secret` as the documentation shows, a pod whose ServiceAccount
is bound to one and which names the other itself, run by the real kubelet from the project's
image, printing what it received; the stored pod holds references, never a value. The binding is
refused until the namespace carries the label that routes its pods to the webhook, with the
command that adds it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.install.cluster import InstallCluster, wait_for
from tests.install.journeys import finished, pod
from tests.support.keys import service_account_key_file

CLIENT_EMAIL = "loader@ml-platform-demo.iam.gserviceaccount.com"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TEAM = "vision-team"  # a namespace of its own: the label cannot be taken off again
LABEL = "gpu-admission.io/serviceaccount-credentials"
PRINT_WHAT_IT_GOT = (
    "import json, os\n"
    "path = os.environ['GOOGLE_APPLICATION_CREDENTIALS']\n"
    "print(path)\n"
    "print(json.load(open(path))['client_email'])\n"
    "for name in sorted(n for n in os.environ if n.startswith('AWS_')):\n"
    "    print(name + '=' + os.environ[name])\n"
)


def test_a_pod_receives_credentials_from_its_annotation_and_service_account(
    installed: InstallCluster, tmp_path: Path
) -> None:
    installed.namespace(TEAM)
    gcp_key = service_account_key_file(tmp_path / "key.json", CLIENT_EMAIL)
    for args in (
        [f"--from-file=key.json={gcp_key}", "--type=gcp-credential", "gcs-reader"],
        [
            "--type=aws-credential",
            f"--from-literal=AWS_ACCESS_KEY_ID={KEY_ID}",
            f"--from-literal=AWS_SECRET_ACCESS_KEY={SECRET_KEY}",
            "--from-literal=AWS_REGION=us-west-2",
            "s3-writer",
        ],
    ):
        installed.kubectl("-n", TEAM, "create", "secret", "generic", *args)
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": "trainer",
            "namespace": TEAM,
            "annotations": {"gpu-admission.io/cloud-credentials": "gcs-reader"},
        },
    }
    refused = installed.apply([account], check=False)
    assert refused.returncode != 0
    assert "ValidatingAdmissionPolicy 'gpu-admission-serviceaccount-credentials'" in refused.stderr
    assert f"kubectl label namespace {TEAM} {LABEL}=true" in refused.stderr, refused.stderr
    installed.kubectl("label", "namespace", TEAM, f"{LABEL}=true")  # the administrator's step
    # The policy reads the namespace from the API server's cache, a moment behind the write.
    wait_for(
        lambda: installed.apply([account], check=False).returncode == 0,
        "the binding to be admitted in the labelled namespace",
    )
    prep = pod(
        "data-prep",
        "",
        serviceAccountName="trainer",
        container={"command": ["python3", "-c", PRINT_WHAT_IT_GOT]},
    )
    prep["metadata"]["namespace"] = TEAM
    prep["metadata"]["annotations"] = {"gpu-admission.io/cloud-credentials": "s3-writer"}
    installed.apply([prep])
    assert finished(installed, "data-prep", namespace=TEAM).splitlines() == [
        "/var/run/secrets/gcp/gcs-reader/key.json",
        CLIENT_EMAIL,
        f"AWS_ACCESS_KEY_ID={KEY_ID}",
        "AWS_DEFAULT_REGION=us-west-2",
        "AWS_REGION=us-west-2",
        f"AWS_SECRET_ACCESS_KEY={SECRET_KEY}",
    ]
    # The stored pod holds references only, never a value.
    stored = installed.core.read_namespaced_pod("data-prep", TEAM)
    spec = json.dumps(installed.api.sanitize_for_serialization(stored.spec))
    assert SECRET_KEY not in spec and KEY_ID not in spec and "PRIVATE KEY" not in spec
    # The label cannot be taken off while it routes bound ServiceAccounts' pods.
    unlabel = installed.kubectl("label", "namespace", TEAM, f"{LABEL}-", check=False)
    assert "gpu-admission-credential-namespaces" in unlabel.stderr, unlabel.stderr
    installed.kubectl("delete", "namespace", TEAM, "--wait=false")
