"""The emulated kube-apiserver: HTTP routing, the write pipeline (defaulting, admission, registry
preparation, validation, storage), reads, watches and the garbage collector."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import json
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from tests.world.kubelet.logs import fetch_log, log_container

from . import discovery, kinds, protobuf
from .admission_types import AdmissionAttributes, AdmissionHook
from .errors import StatusError, already_exists, bad_request, conflict, not_found, qualified
from .faults import Faults
from .patch import apply_patch
from .resources import RESOURCES, Resource, by_plural, lookup
from .selectors import matcher
from .store import Obj, Store, Watcher
from .tls import user_from_peer_cert
from .tokens import TokenIssuer

CONTROLLER_USER = "system:serviceaccount:kube-system:{}"
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
JSON = "application/json"


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def controller_user(name: str) -> dict[str, Any]:
    return {
        "username": CONTROLLER_USER.format(name),
        "groups": [
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
            "system:authenticated",
        ],
    }


class Request:
    """What the write pipeline needs from one API call."""

    def __init__(self, user: dict[str, Any], query: dict[str, list[str]]) -> None:
        self.user = user
        self.query = query
        self.warnings: list[str] = []

    def first(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default

    @property
    def dry_run(self) -> bool:
        return "All" in self.query.get("dryRun", [])


class KubeAPIServer:
    """State and behaviour; ``app`` serves it over HTTP. All methods run on the server's loop
    unless they say otherwise."""

    def __init__(
        self, *, history_size: int = 1000, bookmark_interval: float = 60.0, ca_pem: str = ""
    ) -> None:
        self.store = Store(history_size)
        self.bookmark_interval = bookmark_interval
        self.admission: AdmissionHook | None = None
        self.faults = Faults()
        # API groups answered as a server without them answers (404): an older cluster.
        self.unserved_groups: set[str] = set()
        self.tokens = TokenIssuer()  # the runner sets its issuer to the served URL
        self.faults._drop_watches = lambda: self.call_in_loop(self.store.drop_watchers)
        self.faults._compact = lambda: self.call_in_loop(self.store.compact)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._ca_pem = ca_pem
        self._gc_wakeup: asyncio.Event | None = None
        self._gc_paused = False
        self._gc_task: asyncio.Task[None] | None = None
        self._watch_tasks: set[asyncio.Task[Any]] = set()
        self.app = web.Application(middlewares=[self._middleware], client_max_size=16 * 2**20)
        self.app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self.app.on_startup.append(self._on_startup)
        self.app.on_shutdown.append(self._on_shutdown)

    # ================================================================= lifecycle & thread-safety
    async def _on_startup(self, _app: web.Application) -> None:
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._gc_wakeup = asyncio.Event()
        for name in ("default", "kube-system", "kube-public"):
            await self.create(
                by_plural("namespaces"),
                "",
                {"metadata": {"name": name}},
                Request(controller_user("bootstrap"), {}),
                admit=False,
            )
        self._gc_task = asyncio.create_task(self._gc_loop())

    async def _on_shutdown(self, _app: web.Application) -> None:
        self.store.drop_watchers()
        if self._gc_task:
            self._gc_task.cancel()

    def call_in_loop(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the server's loop (directly when already there) and return its result."""
        if self.loop is None or threading.get_ident() == self._loop_thread:
            return fn()
        done = threading.Event()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # handed back to the calling thread
                box["error"] = exc
            finally:
                done.set()

        self.loop.call_soon_threadsafe(run)
        if not done.wait(10):
            raise TimeoutError("emulator loop did not answer")
        if "error" in box:
            raise box["error"]
        return box["value"]

    # ================================================================= store access for tests/hooks
    def get_object(
        self, resource: str, namespace: str | None, name: str, group: str | None = None
    ) -> Obj | None:
        """The stored object (a copy), or None. Safe from any thread."""
        r = by_plural(resource, group)
        return self.call_in_loop(lambda: self._read(r, namespace or "", name))

    def list_objects(
        self, resource: str, namespace: str | None = None, group: str | None = None
    ) -> list[Obj]:
        """Stored objects of ``resource`` (all namespaces when None). Safe from any thread."""
        r = by_plural(resource, group)

        def collect() -> list[Obj]:
            items = self.store.list(r.key, namespace)
            for item in items:
                kinds.restored_after_store(r, item)
            return items

        return self.call_in_loop(collect)

    def _read(self, r: Resource, namespace: str, name: str) -> Obj | None:
        obj = self.store.get(r.key, namespace if r.namespaced else "", name)
        if obj is not None:
            kinds.restored_after_store(r, obj)
        return obj

    def _wake_gc(self) -> None:
        if self._gc_wakeup is not None and not self._gc_paused:
            self._gc_wakeup.set()

    def pause_gc(self, paused: bool = True) -> None:
        """Hold the garbage collector and the namespace controller (as when
        kube-controller-manager is slow or down): deletions that wait on them stay pending.
        Safe from any thread."""

        def apply() -> None:
            self._gc_paused = paused
            if not paused:
                self._wake_gc()

        self.call_in_loop(apply)

    # ================================================================= admission
    def _attributes(
        self,
        r: Resource,
        subresource: str,
        operation: str,
        namespace: str,
        name: str,
        obj: Obj | None,
        old: Obj | None,
        req: Request,
        options: dict[str, Any],
    ) -> AdmissionAttributes:
        return AdmissionAttributes(
            operation=operation,
            group=r.group,
            version=r.version,
            resource=r.plural,
            subresource=subresource,
            kind_group=r.group,
            kind_version=r.version,
            kind=r.kind,
            namespace=namespace,
            name=name,
            object=copy.deepcopy(obj),
            old_object=copy.deepcopy(old),
            dry_run=req.dry_run,
            options=copy.deepcopy(options),
            user_info=copy.deepcopy(req.user),
        )

    async def _mutate(self, attrs: AdmissionAttributes, req: Request) -> Obj | None:
        if self.admission is None:
            return attrs.object
        patched, warnings = await self.admission.mutate(attrs)
        req.warnings.extend(warnings)
        # Detach from the hook's view so later registry steps cannot alter what it saw.
        return copy.deepcopy(patched if patched is not None else attrs.object)

    async def _validate(self, attrs: AdmissionAttributes, req: Request) -> None:
        if self.admission is not None:
            req.warnings.extend(await self.admission.validate(attrs))

    def _options(
        self, kind: str, req: Request, body_options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        options: dict[str, Any] = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
        if body_options:
            options.update(
                {k: v for k, v in body_options.items() if k not in ("kind", "apiVersion")}
            )
        if req.dry_run:
            options["dryRun"] = ["All"]
        for name in ("fieldManager", "fieldValidation"):
            value = req.first(name)
            if value:
                options[name] = value
        return options

    # ================================================================= namespaces
    def _check_namespace(self, r: Resource, namespace: str, creating: bool) -> None:
        if not r.namespaced:
            return
        ns = self.store.get("/namespaces", "", namespace)
        if ns is None:
            raise not_found("namespaces", "", namespace)
        if creating and ns["metadata"].get("deletionTimestamp"):
            raise StatusError(
                403,
                "Forbidden",
                f'{r.plural} "{namespace}" is forbidden: unable to create new content in '
                f"namespace {namespace} because it is being terminated",
                {
                    "name": namespace,
                    "kind": r.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    def _prepare_body(self, r: Resource, namespace: str, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        api_version = body.get("apiVersion")
        if api_version and api_version != r.group_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({r.group_version})"
            )
        if body.get("kind") and body["kind"] != r.kind:
            raise bad_request(
                f"the kind in the data ({body['kind']}) does not match the expected kind ({r.kind})"
            )
        obj = copy.deepcopy(body)
        obj["apiVersion"] = r.group_version
        obj["kind"] = r.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if r.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        return obj

    # ================================================================= create
    async def create(
        self, r: Resource, namespace: str, body: Any, req: Request, *, admit: bool = True
    ) -> Obj:
        self._check_namespace(r, namespace, creating=True)
        obj = self._prepare_body(r, namespace, body)
        meta = obj["metadata"]
        for field in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "resourceVersion",
            "generation",
            "selfLink",
        ):
            meta.pop(field, None)
        kinds.apply_defaults(r, obj)
        options = self._options("CreateOptions", req)
        if admit:
            kinds.builtin_mutating_admission(
                r, obj, namespace, lambda ns, name: self.store.get("/serviceaccounts", ns, name)
            )
            attrs = self._attributes(
                r, "", "CREATE", namespace, meta.get("name", ""), obj, None, req, options
            )
            obj = await self._mutate(attrs, req) or obj
            meta = obj["metadata"]
            if r.namespaced:
                meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = kinds.generated_name(meta["generateName"])
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        kinds.prepare_create(r, obj, meta["creationTimestamp"])
        kinds.validate_create(r, obj)
        if admit:
            await self._validate(
                self._attributes(r, "", "CREATE", namespace, meta["name"], obj, None, req, options),
                req,
            )
        if self.store.get(r.key, meta.get("namespace", ""), meta["name"]) is not None:
            raise already_exists(r.plural, r.group, meta["name"])
        if req.dry_run:
            kinds.restored_after_store(r, obj)
            return obj
        stored = self.store.put(r.key, obj, None)
        kinds.restored_after_store(r, stored)
        if r.kind == "Namespace":
            await self._populate_namespace(meta["name"])
        return stored

    async def _populate_namespace(self, name: str) -> None:
        """What the serviceaccount and root-ca-cert-publisher controllers do for a new namespace."""
        sa_req = Request(controller_user("service-account-controller"), {})
        await self.create(
            by_plural("serviceaccounts"), name, {"metadata": {"name": "default"}}, sa_req
        )
        ca_req = Request(controller_user("root-ca-cert-publisher"), {})
        await self.create(
            by_plural("configmaps"),
            name,
            {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": self._ca_pem}},
            ca_req,
            admit=False,
        )

    # ================================================================= update / patch
    async def update(
        self,
        r: Resource,
        namespace: str,
        name: str,
        subresource: str,
        transform: Callable[[Obj], Obj],
        req: Request,
        *,
        admit: bool = True,
        options_kind: str = "UpdateOptions",
    ) -> Obj:
        """Read-modify-write: ``transform`` builds the new object from the stored one."""
        self._check_namespace(r, namespace, creating=False)
        old = self._read(r, namespace, name)
        if old is None:
            raise not_found(r.plural, r.group, name)
        new = transform(copy.deepcopy(old))
        new = self._prepare_body(r, namespace, new)
        meta = new["metadata"]
        if meta.get("name", name) != name:
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({name})"
            )
        requested_rv = meta.get("resourceVersion")
        if requested_rv and requested_rv != old["metadata"]["resourceVersion"]:
            raise conflict(r.plural, r.group, name)
        # A uid in the written object is a precondition (defaultUpdatedObjectInfo.Preconditions):
        # a write meant for an object since deleted and re-created under the name fails.
        requested_uid = meta.get("uid")
        if requested_uid and requested_uid != old["metadata"]["uid"]:
            raise StatusError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {qualified(r.plural, r.group)} "{name}": '
                f"StorageError: invalid object, Code: 4, Key: /registry/{r.plural}/"
                f"{namespace + '/' if namespace else ''}{name}, ResourceVersion: 0, "
                f"AdditionalErrorMsg: Precondition failed: UID in precondition: {requested_uid}, "
                f"UID in object meta: {old['metadata']['uid']}",
                {"name": name, "group": r.group, "kind": r.plural}
                if r.group
                else {"name": name, "kind": r.plural},
            )
        for field in (
            "name",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if field in old["metadata"]:
                meta[field] = old["metadata"][field]
            else:
                meta.pop(field, None)
        meta.setdefault("generation", old["metadata"].get("generation"))
        if meta.get("generation") is None:
            meta.pop("generation")
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        kinds.apply_defaults(r, new)
        options = self._options("UpdateOptions", req)
        if admit:
            attrs = self._attributes(
                r, subresource, "UPDATE", namespace, name, new, old, req, options
            )
            new = await self._mutate(attrs, req) or new
        kinds.prepare_update(r, subresource, new, old)
        kinds.validate_update(r, subresource, new, old)
        if admit:
            await self._validate(
                self._attributes(r, subresource, "UPDATE", namespace, name, new, old, req, options),
                req,
            )
        if new == old:
            return old  # a no-op write keeps the resourceVersion, as etcd3 storage does
        if req.dry_run:
            return new
        new_meta = new["metadata"]
        finalized = new_meta.get("deletionTimestamp") and not new_meta.get("finalizers")
        if finalized and r.kind != "Namespace":
            gone = self.store.remove(r.key, new)
            self._wake_gc()
            return gone
        stored = self.store.put(r.key, new, old)
        kinds.restored_after_store(r, stored)
        self._wake_gc()
        return stored

    # ================================================================= delete
    async def delete(
        self,
        r: Resource,
        namespace: str,
        name: str,
        body: dict[str, Any],
        req: Request,
        *,
        admit: bool = True,
    ) -> tuple[Obj, bool]:
        """Returns (object, deleted-now)."""
        self._check_namespace(r, namespace, creating=False)
        old = self._read(r, namespace, name)
        if old is None:
            raise not_found(r.plural, r.group, name)
        preconditions = body.get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] != old["metadata"]["uid"]:
            raise StatusError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {r.plural} "{name}": Precondition failed: '
                f"UID in precondition: {preconditions['uid']}, UID in object meta: "
                f"{old['metadata']['uid']}",
                {"name": name, "kind": r.plural},
            )
        if (
            preconditions.get("resourceVersion")
            and preconditions["resourceVersion"] != old["metadata"]["resourceVersion"]
        ):
            raise conflict(r.plural, r.group, name)
        policy = body.get("propagationPolicy") or req.first("propagationPolicy")
        orphan_flag = body.get("orphanDependents")
        if orphan_flag is None and req.first("orphanDependents") is not None:
            orphan_flag = req.first("orphanDependents") == "true"
        if policy is None and orphan_flag is not None:
            policy = "Orphan" if orphan_flag else "Background"
        if policy is None:
            # batch/v1 Jobs keep the legacy default of orphaning their pods.
            policy = "Orphan" if r.kind == "Job" else "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise StatusError(
                422,
                "Invalid",
                f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
                f'"{policy}": supported values: "Foreground", "Background", "Orphan", "nil"',
            )
        options = self._options("DeleteOptions", req, body)
        if admit:
            attrs = self._attributes(r, "", "DELETE", namespace, name, None, old, req, options)
            await self._mutate(attrs, req)
            await self._validate(attrs, req)
        if req.dry_run:
            return old, False
        meta = old["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Foreground" and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        if policy == "Orphan" and ORPHAN not in finalizers:
            finalizers.append(ORPHAN)
        if r.kind == "Namespace":
            return self._terminate_namespace(old), False
        if not finalizers:
            gone = self.store.remove(r.key, old)
            self._wake_gc()
            return gone, True
        if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or []):
            return old, False
        new = copy.deepcopy(old)
        new["metadata"]["finalizers"] = finalizers
        new["metadata"].setdefault("deletionTimestamp", now_rfc3339())
        new["metadata"].setdefault("deletionGracePeriodSeconds", 0)
        if r.has_generation:
            new["metadata"]["generation"] = meta.get("generation", 1) + 1
        stored = self.store.put(r.key, new, old)
        self._wake_gc()
        return stored, False

    def _terminate_namespace(self, ns: Obj) -> Obj:
        if ns["metadata"].get("deletionTimestamp"):
            return ns
        new = copy.deepcopy(ns)
        new["metadata"]["deletionTimestamp"] = now_rfc3339()
        new["status"] = {"phase": "Terminating"}
        stored = self.store.put("/namespaces", new, ns)
        self._wake_gc()
        return stored

    # ================================================================= garbage collection
    async def _gc_loop(self) -> None:
        assert self._gc_wakeup is not None
        while True:
            await self._gc_wakeup.wait()
            self._gc_wakeup.clear()
            try:
                await self._gc_pass()
            except StatusError:
                self._gc_wakeup.set()  # a conflicting write raced us: look again
            await asyncio.sleep(0)

    async def _gc_pass(self) -> None:
        gc = Request(controller_user("generic-garbage-collector"), {})
        objects = self.store.all_objects()
        by_uid = {obj["metadata"]["uid"]: (key, obj) for key, obj in objects}
        for key, obj in objects:
            meta = obj["metadata"]
            r = _resource_for_key(key)
            dependents = [
                (k, o)
                for k, o in objects
                if any(
                    ref.get("uid") == meta["uid"]
                    for ref in o["metadata"].get("ownerReferences") or []
                )
            ]
            finalizers = meta.get("finalizers") or []
            if meta.get("deletionTimestamp") and ORPHAN in finalizers:
                for dep_key, dep in dependents:
                    dep_r = _resource_for_key(dep_key)

                    def drop_ref(o: Obj, uid: str = meta["uid"]) -> Obj:
                        o["metadata"]["ownerReferences"] = [
                            ref
                            for ref in o["metadata"].get("ownerReferences") or []
                            if ref.get("uid") != uid
                        ] or None
                        if o["metadata"]["ownerReferences"] is None:
                            del o["metadata"]["ownerReferences"]
                        return o

                    await self._gc_update(dep_r, dep, drop_ref, gc)
                await self._remove_finalizer(r, obj, ORPHAN, gc)
            elif meta.get("deletionTimestamp") and FOREGROUND in finalizers:
                blocking = False
                for dep_key, dep in dependents:
                    if not dep["metadata"].get("deletionTimestamp"):
                        await self._gc_delete(_resource_for_key(dep_key), dep, "Foreground", gc)
                    if any(
                        ref.get("uid") == meta["uid"] and ref.get("blockOwnerDeletion")
                        for ref in dep["metadata"].get("ownerReferences") or []
                    ):
                        blocking = True
                if not blocking:
                    await self._remove_finalizer(r, obj, FOREGROUND, gc)
            elif r.kind == "Namespace" and meta.get("deletionTimestamp"):
                await self._finish_namespace(obj, objects, gc)
            refs = meta.get("ownerReferences") or []
            if refs and not meta.get("deletionTimestamp"):
                owners = [by_uid.get(ref.get("uid")) for ref in refs]
                if all(owner is None for owner in owners):
                    await self._gc_delete(r, obj, "Background", gc)
                elif any(
                    owner is not None
                    and ref.get("blockOwnerDeletion")
                    and FOREGROUND in (owner[1]["metadata"].get("finalizers") or [])
                    for ref, owner in zip(refs, owners, strict=True)
                ):
                    await self._gc_delete(r, obj, "Foreground", gc)

    async def _finish_namespace(self, ns: Obj, objects: list[tuple[str, Obj]], gc: Request) -> None:
        name = ns["metadata"]["name"]
        remaining = [(k, o) for k, o in objects if o["metadata"].get("namespace") == name]
        for key, obj in remaining:
            if not obj["metadata"].get("deletionTimestamp"):
                await self._gc_delete(_resource_for_key(key), obj, "Background", gc)
        if not remaining:
            self.store.remove("/namespaces", ns)

    async def _gc_delete(self, r: Resource, obj: Obj, policy: str, gc: Request) -> None:
        meta = obj["metadata"]
        try:
            await self.delete(
                r,
                meta.get("namespace", ""),
                meta["name"],
                {"propagationPolicy": policy, "preconditions": {"uid": meta["uid"]}},
                gc,
            )
        except StatusError as exc:
            if exc.code != 404:
                raise
        self._wake_gc()

    async def _gc_update(
        self, r: Resource, obj: Obj, transform: Callable[[Obj], Obj], gc: Request
    ) -> None:
        meta = obj["metadata"]
        try:
            await self.update(r, meta.get("namespace", ""), meta["name"], "", transform, gc)
        except StatusError as exc:
            if exc.code != 404:
                raise

    async def _remove_finalizer(self, r: Resource, obj: Obj, finalizer: str, gc: Request) -> None:
        def without(o: Obj) -> Obj:
            o["metadata"]["finalizers"] = [
                f for f in o["metadata"].get("finalizers") or [] if f != finalizer
            ]
            return o

        await self._gc_update(r, obj, without, gc)

    # ================================================================= HTTP layer
    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        error, delay = self.faults.record(request.method, request.path)
        if delay:
            await asyncio.sleep(delay)
        if error is not None:
            if error.code == 429:
                status = StatusError(
                    429,
                    "TooManyRequests",
                    "Too many requests, please try again later.",
                    {"retryAfterSeconds": error.retry_after},
                )
                return _status_response(status, {"Retry-After": str(error.retry_after)})
            return _status_response(
                StatusError(
                    error.code,
                    "InternalError",
                    "Internal error occurred: injected fault",
                    {"causes": [{"message": "injected fault"}]},
                )
            )
        try:
            return await handler(request)
        except StatusError as exc:
            return _status_response(exc)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        simple = self._simple_document(path)
        if simple is not None:
            return web.json_response(simple)
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        parts = [p for p in path.split("/") if p]
        if parts and parts[0] == "openapi":
            return self._openapi(parts)
        route = _parse_resource_path(parts)
        if route is None or route[0].group in self.unserved_groups:
            raise StatusError(
                404,
                "NotFound",
                "the server could not find the requested resource",
                {
                    "causes": [
                        {"reason": "UnexpectedServerResponse", "message": "404 page not found"}
                    ]
                },
            )
        r, namespace, name, subresource = route
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        req = Request(
            user_from_peer_cert(peer), {k: request.query.getall(k) for k in request.query}
        )
        response = await self._handle(request, req, r, namespace, name, subresource)
        for warning in req.warnings:
            response.headers.add("Warning", f'299 - "{_header_safe(warning)}"')
        return response

    def _token_request(self, namespace: str, name: str, body: Any) -> Obj:
        """`serviceaccounts/token` (TokenRequest; see tokens)."""
        accounts = by_plural("serviceaccounts")
        self._check_namespace(accounts, namespace, creating=False)
        account = self._read(accounts, namespace, name)
        if account is None:
            raise not_found(accounts.plural, accounts.group, name)
        body = body if isinstance(body, dict) else {}
        bound = (body.get("spec") or {}).get("boundObjectRef") or {}
        pod = None
        if bound.get("kind") == "Pod":
            pods = by_plural("pods")
            pod = self._read(pods, namespace, bound.get("name", ""))
            if pod is None or (bound.get("uid") and bound["uid"] != pod["metadata"].get("uid")):
                raise not_found(pods.plural, pods.group, bound.get("name", ""))
        return self.tokens.request_token(account, body, pod)

    async def _pod_log(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """`pods/log`: proxied to the kubelet of the pod's node (see kubelet_logs)."""
        pods = by_plural("pods")
        self._check_namespace(pods, namespace, creating=False)
        pod = self._read(pods, namespace, name)
        if pod is None:
            raise not_found(pods.plural, pods.group, name)
        container = log_container(pod, name, request.query.get("container", ""))
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:  # not scheduled yet: an empty log, as kube-apiserver answers
            return web.Response(body=b"", content_type="text/plain")
        node = self._read(by_plural("nodes"), "", node_name)
        passed = {k: request.query[k] for k in ("tailLines", "limitBytes") if k in request.query}
        body = await fetch_log(node, namespace, name, container, urlencode(passed))
        return web.Response(body=body, content_type="text/plain")

    def _simple_document(self, path: str) -> dict[str, Any] | None:
        if path == "/.well-known/openid-configuration":
            return self.tokens.discovery()
        if path == "/openid/v1/jwks":
            return self.tokens.jwks()
        if path == "/version":
            return discovery.SERVER_VERSION
        if path == "/api":
            return discovery.api_versions()
        if path == "/apis":
            return discovery.api_group_list()
        parts = [p for p in path.split("/") if p]
        if len(parts) == 2 and parts[0] == "api":
            return discovery.api_resource_list("", parts[1])
        if len(parts) == 2 and parts[0] == "apis":
            return discovery.api_group(parts[1])
        if len(parts) == 3 and parts[0] == "apis":
            return discovery.api_resource_list(parts[1], parts[2])
        return None

    def _openapi(self, parts: list[str]) -> web.Response:
        if parts == ["openapi", "v3"]:
            return web.json_response(discovery.openapi_v3_index())
        if len(parts) == 4 and parts[:3] == ["openapi", "v3", "api"]:
            document = discovery.openapi_v3_group_version("", parts[3])
        elif len(parts) == 5 and parts[:3] == ["openapi", "v3", "apis"]:
            document = discovery.openapi_v3_group_version(parts[3], parts[4])
        else:
            document = None
        if document is not None:
            return web.json_response(document)
        raise StatusError(404, "NotFound", "the server could not find the requested resource")

    async def _handle(
        self,
        request: web.Request,
        req: Request,
        r: Resource,
        namespace: str,
        name: str,
        subresource: str,
    ) -> web.StreamResponse:
        method = request.method
        if subresource and subresource not in r.subresources:
            raise StatusError(404, "NotFound", "the server could not find the requested resource")
        if subresource == "log":
            if method != "GET":
                raise StatusError(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
            return await self._pod_log(request, namespace, name)
        if method == "GET":
            if name:
                self._check_namespace(r, namespace, creating=False)
                obj = self._read(r, namespace, name)
                if obj is None:
                    raise not_found(r.plural, r.group, name)
                return _json(obj)
            if _is_true(req.first("watch")):
                return await self._watch(request, req, r, namespace)
            return self._list(request, req, r, namespace)
        body = await _read_json(request) if method in ("POST", "PUT", "PATCH") else None
        if method == "POST" and subresource == "token":
            return _json(self._token_request(namespace, name, body), 201)
        if method == "POST" and subresource == "binding":
            return _json(await self._bind(r, namespace, name, body, req), 201)
        if method == "POST" and not name:
            return _json(await self.create(r, namespace, body, req), 201)
        if method == "PUT" and name:

            def replace(_old: Obj) -> Obj:
                return body if isinstance(body, dict) else {}

            return _json(await self.update(r, namespace, name, subresource, replace, req))
        if method == "PATCH" and name:
            raw = await request.read()
            content_type = request.headers.get("Content-Type", "")

            def patched(old: Obj) -> Obj:
                new = apply_patch(content_type, old, raw)
                # A patch never carries the stored resourceVersion unless the client put it there.
                if (new.get("metadata") or {}).get("resourceVersion") == old["metadata"][
                    "resourceVersion"
                ]:
                    new["metadata"].pop("resourceVersion")
                return new

            return _json(await self.update(r, namespace, name, subresource, patched, req))
        if method == "DELETE" and name:
            raw = await request.read()
            options = json.loads(raw) if raw.strip() else {}
            obj, deleted = await self.delete(r, namespace, name, options, req)
            if deleted and r.kind != "Pod":
                return _json(
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": {
                            "name": name,
                            "group": r.group,
                            "kind": r.plural,
                            "uid": obj["metadata"]["uid"],
                        },
                    }
                )
            return _json(obj)
        if method == "DELETE":
            return await self._delete_collection(req, r, namespace)
        raise StatusError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    async def _bind(self, r: Resource, namespace: str, name: str, body: Any, req: Request) -> Obj:
        target = ((body or {}).get("target") or {}).get("name")
        if r.kind != "Pod" or not target:
            raise bad_request("a Binding needs target.name")

        def bind(pod: Obj) -> Obj:
            spec = pod["spec"]
            if spec.get("nodeName"):
                raise conflict("pods/binding", "", name) from None
            if spec.get("schedulingGates"):
                raise StatusError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod '
                    f"{name} has non-empty .spec.schedulingGates",
                )
            spec["nodeName"] = target
            conditions = [
                c
                for c in pod.get("status", {}).get("conditions") or []
                if c.get("type") != "PodScheduled"
            ]
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": now_rfc3339(),
                }
            )
            pod.setdefault("status", {})["conditions"] = conditions
            return pod

        old = self._read(r, namespace, name)
        if old is None:
            raise not_found(r.plural, r.group, name)
        new = bind(copy.deepcopy(old))
        if not req.dry_run:
            self.store.put(r.key, new, old)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    async def _delete_collection(self, req: Request, r: Resource, namespace: str) -> web.Response:
        self._check_namespace(r, namespace, creating=False)
        match = matcher(req.first("labelSelector"), req.first("fieldSelector"), r.plural)
        items = [o for o in self.store.list(r.key, namespace if r.namespaced else None) if match(o)]
        for obj in items:
            try:
                await self.delete(
                    r, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], {}, req
                )
            except StatusError as exc:
                if exc.code != 404:
                    raise
        return _json(self._list_body(r, items, {"resourceVersion": str(self.store.rv)}))

    # ================================================================= list
    def _list_body(self, r: Resource, items: list[Obj], meta: dict[str, Any]) -> Obj:
        for item in items:
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return {
            "kind": f"{r.kind}List",
            "apiVersion": r.group_version,
            "metadata": meta,
            "items": items,
        }

    def _list(
        self, request: web.Request, req: Request, r: Resource, namespace: str
    ) -> web.Response:
        if r.namespaced and namespace:
            self._check_namespace(r, namespace, creating=False)
        match = matcher(req.first("labelSelector"), req.first("fieldSelector"), r.plural)
        items = [o for o in self.store.list(r.key, namespace or None) if match(o)]
        for item in items:
            kinds.restored_after_store(r, item)
        list_rv = self.store.rv
        limit = int(req.first("limit") or 0)
        token = req.first("continue")
        if req.first("resourceVersion") == "0" and not token:
            limit = 0  # served from the watch cache, which ignores limit for RV=0
        start_after: tuple[str, str] | None = None
        if token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                list_rv, start_after = int(decoded["rv"]), tuple(decoded["start"])
            except (ValueError, KeyError, TypeError) as exc:
                raise bad_request(f"continue key is not valid: {exc}") from exc
            if list_rv < self.store.compacted_rv:
                raise StatusError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter, or use "
                    "the continue token in this response to retrieve the remainder of the "
                    "results. Continuing with the provided token results in an inconsistent "
                    "list - objects that were created, modified, or deleted between the time "
                    "the first chunk was returned and now may show up in the list.",
                )
            items = [
                o
                for o in items
                if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > start_after
            ]
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if limit and len(items) > limit:
            remaining = len(items) - limit
            items = items[:limit]
            last = items[-1]["metadata"]
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps(
                    {
                        "v": "meta.k8s.io/v1",
                        "rv": list_rv,
                        "start": [last.get("namespace", ""), last["name"]],
                    }
                ).encode()
            ).decode()
            meta["remainingItemCount"] = remaining
        if "as=Table" in request.headers.get("Accept", ""):
            return _json(discovery.table(items, meta))
        return _json(self._list_body(r, items, meta))

    # ================================================================= watch
    async def _watch(
        self, request: web.Request, req: Request, r: Resource, namespace: str
    ) -> web.StreamResponse:
        if r.namespaced and namespace:
            self._check_namespace(r, namespace, creating=False)
        match = matcher(req.first("labelSelector"), req.first("fieldSelector"), r.plural)
        timeout = req.first("timeoutSeconds")
        deadline = (asyncio.get_running_loop().time() + float(timeout)) if timeout else None
        bookmarks = _is_true(req.first("allowWatchBookmarks"))
        watcher = Watcher(r.key, namespace or None, match)
        rv_text = req.first("resourceVersion") or ""
        initial: list[tuple[str, Obj]] = []
        error: StatusError | None = None
        send_initial = _is_true(req.first("sendInitialEvents"))
        if rv_text in ("", "0") or send_initial:
            # WatchList (sendInitialEvents) and RV ""/"0" both start with the current state.
            initial = [("ADDED", o) for o in self.store.list(r.key, namespace or None) if match(o)]
        else:
            try:
                requested = int(rv_text)
            except ValueError:
                raise bad_request(f'invalid resource version "{rv_text}"') from None
            try:
                for event in self.store.events_since(requested):
                    seen = watcher.translate(event)
                    if seen is not None:
                        initial.append(seen)
            except StatusError as exc:
                error = exc
        if error is None:
            self.store.watchers.add(watcher)
        response = web.StreamResponse(
            headers={"Content-Type": JSON, "Cache-Control": "no-cache, private"}
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            if error is not None:
                await _send(response, "ERROR", error.to_status())
                return response
            for kind, obj in initial:
                await _send(response, kind, self._wire(r, obj))
            if send_initial and bookmarks:
                end = {
                    "resourceVersion": str(self.store.rv),
                    "annotations": {"k8s.io/initial-events-end": "true"},
                }
                await _send(
                    response,
                    "BOOKMARK",
                    {"kind": r.kind, "apiVersion": r.group_version, "metadata": end},
                )
            while True:
                now = asyncio.get_running_loop().time()
                wait = self.bookmark_interval if bookmarks else None
                if deadline is not None:
                    left = deadline - now
                    if left <= 0:
                        break
                    wait = left if wait is None else min(wait, left)
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), wait)
                except TimeoutError:
                    if bookmarks and (
                        deadline is None or asyncio.get_running_loop().time() < deadline
                    ):
                        await _send(
                            response,
                            "BOOKMARK",
                            {
                                "kind": r.kind,
                                "apiVersion": r.group_version,
                                "metadata": {"resourceVersion": str(self.store.rv)},
                            },
                        )
                    continue
                if item is None:
                    break
                await _send(response, item[0], self._wire(r, item[1]))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.watchers.discard(watcher)
        return response

    def _wire(self, r: Resource, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        kinds.restored_after_store(r, obj)
        return obj


# ===================================================================== helpers


def _resource_for_key(key: str) -> Resource:
    group, plural = key.split("/", 1)
    return next(r for r in RESOURCES if r.group == group and r.plural == plural)


def _parse_resource_path(parts: list[str]) -> tuple[Resource, str, str, str] | None:
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        candidate = lookup(group, version, rest[2])
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    r = lookup(group, version, rest[0])
    if r is None or (r.namespaced and not namespace and len(rest) > 1):
        return None
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    return r, namespace, name, subresource


def _is_true(value: str | None) -> bool:
    return value in ("1", "true", "True")


def _header_safe(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(obj).encode(), status=status, content_type=JSON)


def _status_response(error: StatusError, headers: dict[str, str] | None = None) -> web.Response:
    response = _json(error.to_status(), error.code)
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    if request.method == "PATCH":
        return None
    content_type = request.headers.get("Content-Type", "")
    if content_type.split(";")[0].strip() == protobuf.CONTENT_TYPE:
        return protobuf.read_body(content_type, raw)
    try:
        return json.loads(raw or b"null")
    except ValueError as exc:
        raise bad_request(f"the body of the request was in an unknown format: {exc}") from exc


async def _send(response: web.StreamResponse, kind: str, obj: Obj) -> None:
    await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
