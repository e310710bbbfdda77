"""A finding: what one policy would do to one object the cluster already holds.

Made by the audit (`webhooks/audit/objects.py`, run by `gpu-admission audit` and by the controller's
background scan) and read by the report writers (`controllers/reports/`), so it lives here, below
both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

WOULD_REFUSE = "would refuse"
WOULD_CHANGE = "would change"
COULD_NOT_CHECK = "could not check"
SOURCE_CHANGED = "source changed"  # a loaded dataset's source (`audit --sources`)


@dataclass(frozen=True, slots=True)
class Finding:
    policy: str
    result: str  # WOULD_REFUSE, WOULD_CHANGE, COULD_NOT_CHECK or SOURCE_CHANGED
    kind: str
    namespace: str
    name: str
    message: str
    mode: str = "enforce"  # the policy's mode (gpu_admission.config.policy_modes)
    uid: str = ""
    api_version: str = "v1"  # of the object: a workload's is its group's (apps/v1, ...)

    def as_dict(self) -> dict[str, str]:
        return asdict(self)
