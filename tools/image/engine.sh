# Sourced by the scripts here: ENGINE is docker when its daemon answers, else podman.
if [ -n "${ENGINE:-}" ]; then
    :
elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    ENGINE=docker
elif command -v podman >/dev/null 2>&1; then
    ENGINE=podman
else
    echo "no container engine: install docker or podman (apt-get install podman)" >&2
    exit 1
fi
export ENGINE
