"""The HTTPS admission service: each webhook path runs its policies on AdmissionReviews.

One handler object per webhook path holds everything a request needs (its kind, policies and
failure mode), so a request does no lookups beyond the route. Policies are CPU-bound and fast:
they run inline on the event loop. The body is parsed once, straight from bytes into the working
object; nothing is deep-copied or diffed. The raw body is kept only so that the rare retry after a
failing policy (allow failure mode) can start again from the object as received.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from aiohttp import web

from gpu_admission.cluster.view import ClusterView, MissResolver
from gpu_admission.config.model import Config, FailureMode
from gpu_admission.config.policy_modes import PolicyMode
from gpu_admission.process.http_probes import (
    HEALTH_PATH,
    JSON_CONTENT_TYPE,
    READY_PATH,
    Readiness,
    error_response,
    health_handlers,
)
from gpu_admission.process.metrics import (
    UNKNOWN_OPERATION,
    VERDICT_ALLOWED,
    VERDICT_DENIED,
    VERDICT_ERROR,
    AdmissionMetrics,
    Metrics,
)
from webhooks.core.review import (
    WORKLOAD,
    AdmissionRequest,
    ReviewError,
    allowed_response_body,
    parse_review,
    parse_review_head,
    response_body,
    response_tail,
)
from webhooks.core.workload_kinds import kind_index, template_shape_error
from webhooks.dispatch import chain
from webhooks.dispatch.chain import log_records
from webhooks.dispatch.registry import WEBHOOKS, Webhook
from webhooks.policies.interface import (
    MutatingPolicy,
    PolicySet,
    ValidatingPolicy,
    typed_scope_keys,
)
from webhooks.service.draining import DRAIN, Drain
from webhooks.service.memo import MutationMemo, Probe, probed_request

log = logging.getLogger(__name__)

LINGER_SECONDS = 2.0

LOOKUP_WARNING = (
    "some objects this request refers to could not be looked up; checks that need them may "
    "not have run"
)

ADMISSION_METRICS = web.AppKey("admission_metrics", AdmissionMetrics)


class _BodyTooLarge(Exception):
    pass


async def _read_body(request: web.Request, limit: int) -> bytes:
    """Read the body, refusing it as soon as it passes `limit` bytes: a chunked body announces
    no length, so the cap is enforced while reading, not only from Content-Length."""
    content = request.content
    if content.is_eof():
        # The whole body came in with the headers (the usual case for a review of a few KB):
        # take it from the buffer without awaiting.
        body = content.read_nowait()
        if len(body) > limit:
            raise _BodyTooLarge
        return body
    chunks: list[bytes] = []
    size = 0
    # readany() in a plain loop: an `async for` over iter_any() adds an async generator's
    # overhead to every request.
    while chunk := await content.readany():
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def answer_tail(outcome: chain.Outcome) -> bytes:
    """The encoded answer of `outcome`, less the uid (`response_tail`)."""
    return response_tail(
        outcome.allowed,
        patch=outcome.ops,
        warnings=outcome.warnings,
        message=outcome.message,
        code=outcome.code,
        audit_annotations=outcome.audit_annotations,
    )


class AdmissionEndpoint:
    """Answers the AdmissionReviews POSTed to one webhook path."""

    def __init__(
        self,
        webhook: Webhook,
        policy_set: PolicySet,
        view: ClusterView,
        resolver: MissResolver | None,
        failure_mode: FailureMode,
        max_body_bytes: int,
        metrics: AdmissionMetrics,
        modes: Mapping[str, PolicyMode] = chain.ENFORCE_ALL,
        shape_error: Callable[[AdmissionRequest], str | None] | None = None,
    ) -> None:
        self.webhook = webhook
        # What the review's own shapes cannot say (a workload's templates): a malformed field
        # found here is a 400 too, before any policy reads it.
        self.shape_error = shape_error
        self.mutating: tuple[MutatingPolicy, ...] = (
            policy_set.mutating_for(webhook.kind) if webhook.mutating else ()
        )
        self.validating: tuple[ValidatingPolicy, ...] = (
            () if webhook.mutating else policy_set.validating_for(webhook.kind)
        )
        self.policies = self.mutating or self.validating
        # When every policy here names the object types it applies to, most requests (a
        # Secret of another type) are answered from the review's head alone.
        self.head_keys = typed_scope_keys(self.policies)
        self.view = view
        self.resolver = resolver
        self.failure_mode = failure_mode
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics
        self.modes = modes  # the policies that do not enforce
        # Pods of one template get one computed answer (webhooks.service.memo).
        self.memo = MutationMemo() if webhook.mutating and webhook.kind == "Pod" else None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        path = self.webhook.path
        if request.method != "POST":
            return self._refuse(
                started,
                "method",
                error_response(
                    405,
                    f"{path} accepts POST only (got {request.method}); the API server POSTs "
                    "AdmissionReviews here",
                    Allow="POST",
                ),
            )
        # The exact header the API server sends is compared as is; anything else (parameters,
        # case) is parsed.
        if (
            request.headers.get("Content-Type") != JSON_CONTENT_TYPE
            and request.content_type != JSON_CONTENT_TYPE
        ):
            return self._refuse(
                started,
                "content_type",
                error_response(
                    415,
                    f"Content-Type must be {JSON_CONTENT_TYPE}, got "
                    f"{request.headers.get('Content-Type', 'none')!r}; send the AdmissionReview "
                    "as JSON",
                ),
            )
        length = request.content_length
        if length is not None and length > self.max_body_bytes:
            return self._refuse(started, "too_large", self._too_large())
        try:
            body = await _read_body(request, self.max_body_bytes)
        except _BodyTooLarge:
            return self._refuse(started, "too_large", self._too_large())
        memo_key = None
        probe = None
        if self.memo is not None and not self.memo.never_repeats(body):
            probe = self.memo.probe(body, self.view)
            if probe is not None:
                known = self.memo.get(probe.key)
                if known is not None:
                    return self._answer_known(probe, known, started)
                memo_key = probe.key
        try:
            if self.head_keys is not None:
                head = parse_review_head(body, self.webhook.kind)
                if head.scope_key not in self.head_keys:  # no policy applies
                    return self._answer(
                        head.operation, allowed_response_body(head.uid), VERDICT_ALLOWED, started
                    )
            review = (  # decoded once: a probed body is not decoded again
                probed_request(probe, self.webhook.kind)
                if probe is not None
                else parse_review(body, self.webhook.kind)
            )
            problem = self.shape_error(review) if self.shape_error is not None else None
            if problem is not None:
                raise ReviewError(f"not a valid AdmissionReview: {problem}")
        except ReviewError as exc:
            log.warning(
                "bad admission request",
                extra={"webhook": path, "reason": str(exc), "peer": request.remote},
            )
            return self._refuse(started, "invalid_review", error_response(400, str(exc)))
        return await self._review(review, body, started, memo_key)

    def _answer_known(
        self, probe: Probe, known: tuple[chain.Outcome, bytes], started: float
    ) -> web.Response:
        """The answer to a pod like one reviewed before (webhooks.service.memo)."""
        outcome, tail = known
        if outcome.notices:
            self.metrics.noticed(self.webhook.path, outcome.notices)
        if outcome.decisions:
            self.metrics.decided(outcome.decisions)
            log_records(self.webhook.path, probe.uid, outcome)
        return self._answer(
            probe.operation,
            response_body(probe.uid, tail),
            VERDICT_ALLOWED,
            started,
            len(outcome.ops),
        )

    async def _review(
        self,
        review: AdmissionRequest,
        body: bytes,
        started: float,
        memo_key: Hashable | None = None,
    ) -> web.StreamResponse:
        lookup_warning = None
        if self.resolver is not None:
            try:
                await chain.resolve_references(review, self.policies, self.view, self.resolver)
            except Exception as exc:
                refused = self._lookup_failed(review, exc)
                if refused is not None:
                    return self._respond(review, refused, VERDICT_ERROR, started)
                lookup_warning = LOOKUP_WARNING
        if self.webhook.mutating:
            outcome = chain.run_mutating(
                review,
                self.mutating,
                self.view,
                self.failure_mode,
                lambda: json.loads(body)["request"]["object"],
                self.modes,
            )
            memo = self.memo
            if (
                memo is not None
                and memo_key is not None
                and lookup_warning is None
                and memo.applies(review)
            ):
                tail = answer_tail(outcome)
                memo.put(memo_key, outcome, tail)
                return self._respond(review, outcome, self._account(review, outcome), started, tail)
        else:
            outcome = chain.run_validating(
                review, self.validating, self.view, self.failure_mode, self.modes
            )
        if lookup_warning is not None:
            outcome.warnings.append(lookup_warning)
        return self._respond(review, outcome, self._account(review, outcome), started)

    def _respond(
        self,
        review: AdmissionRequest,
        outcome: chain.Outcome,
        verdict: str,
        started: float,
        tail: bytes | None = None,
    ) -> web.Response:
        if tail is None:
            tail = answer_tail(outcome)
        body = response_body(review.uid, tail)
        patch_ops = len(outcome.ops) if outcome.allowed else 0
        if outcome.notices:
            self.metrics.noticed(self.webhook.path, outcome.notices)
        if outcome.decisions:
            self.metrics.decided(outcome.decisions)
            log_records(self.webhook.path, review.uid, outcome)
        return self._answer(review.operation, body, verdict, started, patch_ops)

    def _answer(
        self, operation: str, body: bytes, verdict: str, started: float, patch_ops: int = 0
    ) -> web.Response:
        """Count the answer and send it."""
        self.metrics.answered(
            self.webhook.path, operation, verdict, time.perf_counter() - started, patch_ops
        )
        return web.Response(body=body, content_type=JSON_CONTENT_TYPE)

    def _lookup_failed(self, review: AdmissionRequest, error: Exception) -> chain.Outcome | None:
        """A referenced object is neither cached nor fetchable. Under the deny failure mode the
        request is refused rather than judged on a guess; under allow the policies run on what
        the cache holds."""
        self.metrics.lookup_failed(self.webhook.path)
        log.warning(
            "cluster lookup failed",
            extra={
                "webhook": self.webhook.path,
                "uid": review.uid,
                "namespace": review.namespace,
                "object_name": review.name or "<generated>",
                "error": str(error),
                "failure_mode": str(self.failure_mode),
            },
        )
        if self.failure_mode is not FailureMode.DENY:
            return None
        return chain.Outcome(
            allowed=False,
            code=chain.INTERNAL_ERROR_CODE,
            message=f"the webhook could not look up objects this request refers to: {error}",
        )

    def _account(self, review: AdmissionRequest, outcome: chain.Outcome) -> str:
        """Count failed policies and log one line per denial or failure; returns the verdict."""
        if outcome.allowed and not outcome.failed_policies:
            return VERDICT_ALLOWED
        for policy in outcome.failed_policies:
            self.metrics.policy_failed(self.webhook.path, policy)
        fields: dict[str, Any] = {
            "webhook": self.webhook.path,
            "uid": review.uid,
            "operation": review.operation,
            "kind": review.kind,
            "namespace": review.namespace,
            "object_name": review.name or "<generated>",
            "user": review.username,
            "dry_run": review.dry_run,
        }
        if outcome.failed_policies:
            fields["failed_policies"] = outcome.failed_policies
            fields["failure_mode"] = str(self.failure_mode)
            if outcome.allowed:
                log.warning("admitted without failed policies", extra=fields)
                return VERDICT_ALLOWED
            fields.update(code=outcome.code, denial=outcome.message)
            log.error("admission refused: a policy failed", extra=fields)
            return VERDICT_ERROR
        # Denial messages are written for the user and never carry secret values.
        fields.update(code=outcome.code, denial=outcome.message)
        log.info("admission denied", extra=fields)
        return VERDICT_DENIED

    def _too_large(self) -> web.Response:
        response = error_response(
            413,
            f"request body is larger than the {self.max_body_bytes}-byte limit "
            "(server.max_body_bytes); an AdmissionReview this large is not a normal object",
        )
        response.force_close()  # the unread rest of the body must not be read as a request
        return response

    def _refuse(self, started: float, reason: str, response: web.Response) -> web.Response:
        path = self.webhook.path
        self.metrics.bad_request(path, reason)
        self.metrics.answered(path, UNKNOWN_OPERATION, VERDICT_ERROR, time.perf_counter() - started)
        return response


async def _not_found(request: web.Request) -> web.Response:
    paths = ", ".join(w.path for w in WEBHOOKS)
    return error_response(
        404, f"nothing is served at {request.path}; the webhook paths are {paths}"
    )


def create_app(
    config: Config,
    policy_set: PolicySet,
    view: ClusterView,
    resolver: MissResolver | None,
    readiness: Readiness,
    metrics: Metrics | None = None,
) -> web.Application:
    """The webhook application: every path of `webhooks.dispatch.registry.WEBHOOKS`, plus health
    checks.

    `metrics` is the process's registry (a fresh one when omitted); the app's admission metrics
    are also available as `app[ADMISSION_METRICS]`, and its drain switch as `app[DRAIN]`.
    """
    admission_metrics = AdmissionMetrics(metrics or Metrics(process_metrics=False))
    drain = Drain()
    app = web.Application(
        client_max_size=config.server.max_body_bytes, middlewares=[drain.middleware]
    )
    app[ADMISSION_METRICS] = admission_metrics
    app[DRAIN] = drain
    kinds = kind_index(config)
    for webhook in WEBHOOKS:
        endpoint = AdmissionEndpoint(
            webhook,
            policy_set,
            view,
            resolver,
            config.failure_mode(webhook.path),
            config.server.max_body_bytes,
            admission_metrics,
            config.relaxed_modes(),
            functools.partial(template_shape_error, kinds=kinds)
            if webhook.kind == WORKLOAD
            else None,
        )
        app.router.add_route("*", webhook.path, endpoint.handle)
    healthz, readyz = health_handlers(readiness)
    app.router.add_route("*", HEALTH_PATH, healthz)
    app.router.add_route("*", READY_PATH, readyz)
    app.router.add_route("*", "/{tail:.*}", _not_found)
    return app


def make_runner(app: web.Application, shutdown_timeout: float) -> web.AppRunner:
    """A runner with the service's connection settings. No access log: a line per request
    costs more than the review itself, and denials and failures are logged already. Unread
    bodies (an oversize upload) are drained for at most `LINGER_SECONDS` before closing."""
    return web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        shutdown_timeout=shutdown_timeout,
        lingering_time=LINGER_SECONDS,
    )
