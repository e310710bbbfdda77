"""Where a review of an all-different pod spends its time, step by step, in one process.

`python -m bench.pod_path [--reviews 4000]`: the `/mutate/pods` path of the service (memo probe,
parse, policies, answer encoding, memo put), timed step by step over reviews of the benchmark's
pod that each carry a label of their own, then each mutating policy alone. No network and no TLS:
this is the admission work itself, on warm caches, which a loaded server does slower (the
benchmark's `CPU/request` is the whole cost). Medians of `--repeat` passes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from commands.review_inputs import load_cluster_state
from gpu_admission.cluster.view import ClusterView
from gpu_admission.config.model import FailureMode, load_config
from webhooks.core.patch import Patch
from webhooks.core.review import parse_review, response_body
from webhooks.dispatch import chain
from webhooks.dispatch.registry import build_policy_set
from webhooks.policies.interface import MutatingPolicy
from webhooks.service.memo import MutationMemo, probed_request
from webhooks.service.server import answer_tail

ROOT = Path(__file__).resolve().parent.parent
BODY = ROOT / "bench" / "data" / "pod-from-deployment.mutating.json"
STEPS = ("memo probe", "parse", "policies", "answer encoding", "memo put", "response body")


def _bodies(count: int, tag: str) -> list[bytes]:
    raw = BODY.read_bytes()
    return [
        raw.replace(b'"app": "embedder"', b'"app": "%s-%d"' % (tag.encode(), i), 1)
        for i in range(count)
    ]


def _setup() -> tuple[ClusterView, tuple[MutatingPolicy, ...]]:
    """The benchmark server's view (examples/cluster-state.yaml) and mutating pod policies."""
    config = load_config(environ={})
    view = load_cluster_state(ROOT / "examples" / "cluster-state.yaml", config).view
    return view, build_policy_set(config).mutating_for("Pod")


def steps_us(count: int, tag: str) -> dict[str, float]:
    """Microseconds per review for each step of the endpoint's path."""
    view, policies = _setup()
    memo = MutationMemo()
    spent = dict.fromkeys(STEPS, 0.0)
    for body in _bodies(count, tag):
        t0 = time.perf_counter()
        probe = memo.probe(body, view)
        t1 = time.perf_counter()
        assert probe is not None
        review = probed_request(probe, "Pod")  # a miss: the probe's decode, its raw parts
        t2 = time.perf_counter()
        outcome = chain.run_mutating(
            review,
            policies,
            view,
            FailureMode.DENY,
            lambda b=body: json.loads(b)["request"]["object"],
        )
        t3 = time.perf_counter()
        tail = answer_tail(outcome)
        t4 = time.perf_counter()
        memo.put(probe.key, outcome, tail)
        t5 = time.perf_counter()
        response_body(review.uid, tail)
        t6 = time.perf_counter()
        marks = (t0, t1, t2, t3, t4, t5, t6)
        for i, step in enumerate(STEPS):
            spent[step] += marks[i + 1] - marks[i]
    return {step: 1e6 * seconds / count for step, seconds in spent.items()}


def policies_us(count: int, tag: str) -> dict[str, float]:
    """Microseconds per review for each mutating pod policy, run in chain order."""
    view, policies = _setup()
    spent = {policy.name: 0.0 for policy in policies}
    for body in _bodies(count, tag):
        review = parse_review(body, "Pod")
        patch = Patch(review.object)
        for policy in policies:
            start = time.perf_counter()
            policy.mutate(review, patch, view)
            spent[policy.name] += time.perf_counter() - start
    return {name: 1e6 * seconds / count for name, seconds in spent.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reviews", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    runs = [steps_us(args.reviews, f"s{i}") for i in range(args.repeat)]
    per_policy = [policies_us(args.reviews // 2, f"p{i}") for i in range(args.repeat)]
    for label, table in (("step", runs), ("policy", per_policy)):
        for name in table[0]:
            values = [run[name] for run in table]
            print(
                f"{label:6s} {name:28s} {statistics.median(values):6.1f} us "
                f"({min(values):.1f}-{max(values):.1f})"
            )
    totals = [sum(run.values()) for run in runs]
    print(
        f"{'total':35s} {statistics.median(totals):6.1f} us ({min(totals):.1f}-{max(totals):.1f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
