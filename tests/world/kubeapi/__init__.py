"""An emulator of kube-apiserver for tests: the official ``kubernetes`` client and ``kubectl``
use it unchanged, over HTTPS on 127.0.0.1 with a generated CA, server and admin client certificate.

Run alone: ``python -m tests.world.kubeapi [--port N]`` prints the kubeconfig path and serves until
Ctrl-C.

Pytest fixtures (``tests.world.kubeapi.pytest_plugin``):

* ``kubeapi`` (function scope): a fresh emulator per test. The handle has ``.url``,
  ``.kubeconfig_path``, ``.ca_path``, ``.server`` (``KubeAPIServer``) and ``.faults``
  (``Faults``). Bookmarks every 0.2 s and an event history of 100, so watches see bookmarks and
  410 Gone quickly.
* ``kube_client``: a ``kubernetes.client.ApiClient`` built by ``config.new_client_from_config``
  from that kubeconfig.

Outside pytest: ``runner.start_kubeapi(history_size=..., bookmark_interval=..., port=0)`` returns
the same handle; ``handle.stop()`` ends it.

The server object:

* ``server.admission``: an ``admission_types.AdmissionHook`` or None, settable at any time. It is
  called for every create/update/patch/delete, subresources included, in kube-apiserver's order:
  decode, defaulting, built-in admission plugins, ``mutate`` (no uid/creationTimestamp/generation,
  no generated name, Pods with ``status: {}``), registry preparation, built-in validation,
  ``validate``, storage. Warnings become ``Warning: 299 - "..."`` headers; a ``StatusError``
  rejects the request.
* ``server.pause_gc(paused=True)``: hold the garbage collector and namespace finalization, as a
  slow kube-controller-manager would (a terminating namespace keeps its objects meanwhile).
* ``server.unserved_groups``: API groups to answer 404 for, as a cluster without them does
  (``{"resource.k8s.io"}`` is a cluster before Dynamic Resource Allocation).
* ``server.get_object(resource, namespace, name)`` and ``server.list_objects(resource,
  namespace=None)``: stored objects (copies), safe from any thread.
* ``server.faults``: ``fail(method, path_regex, code=500|429, times=1, retry_after=1)``,
  ``delay(method, path_regex, seconds, times=None)``, ``clear()``, ``drop_watches()``,
  ``compact()``, ``request_count(method=None, path_regex=None)``, ``reset_counts()``.

Behaviour worth knowing: new namespaces get a ``default`` ServiceAccount and the
``kube-root-ca.crt`` ConfigMap, and creating a Pod whose ServiceAccount does not exist is
forbidden (the ServiceAccount admission plugin). Pods get the ``kube-api-access-*`` volume, the
default tolerations and priority; PVCs get the ``kubernetes.io/pvc-protection`` finalizer. Pod spec
updates are limited as in the real server: bind a pod to a node with the ``pods/binding``
subresource. Deleting a batch/v1 Job without a propagationPolicy orphans its pods (the API's
legacy default; kubectl sends Background).

KNOWN GAPS (deliberate shortcuts):

* No authorization (RBAC) and no bearer tokens: the client certificate names the user, anything
  else is ``system:anonymous`` and still allowed.
* Server-side apply (``application/apply-patch+yaml``) answers 415; managedFields are not kept.
  kubectl's client-side apply works.
* Strategic merge picks merge keys by list field name (exact for the kinds served here);
  ``$setElementOrder`` is ignored; ``$retainKeys`` is honoured only on maps.
* Pods are deleted at once (no graceful deletion, grace periods ignored); no pod status
  conditions beyond SchedulingGated and what clients write.
* core/v1 and events.k8s.io/v1 Events are stored separately (no conversion between them).
* ``continue`` pages show the current state, not the first page's snapshot; ``resourceVersion``
  on get/list is accepted but reads always return the latest state (``resourceVersionMatch=Exact``
  is not honoured); a watch from a future resourceVersion just waits.
* Watches always answer JSON (never Table or protobuf); ``kubectl get -w`` is unsupported.
* Tables have only NAME and AGE columns.
* Only this built-in validation runs (names, scheduling gates, nodeName with gates, Secret type,
  Job restartPolicy, Pod spec immutability, finalizers while deleting, resource.k8s.io/v1 claim
  requests and a Pod's resource claims, CEL expressions not compiled); the OpenAPI v3 documents
  contain PATCH parameters only (no schemas).
* Empty lists/maps are kept as sent (Go's omitempty would drop some of them).
"""
