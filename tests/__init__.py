"""The test suite, grouped by the part of the product each folder proves (see docs/development.md).

Paths every part of the suite shares are named here once.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# AdmissionReview requests exactly as a real kube-apiserver v1.36 sent them (see its README).
REVIEW_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "admission-reviews"
