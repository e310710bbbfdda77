"""``python -m tests.world.kubeapi [--port N]``: serve the emulator, print the kubeconfig path."""

from __future__ import annotations

import argparse
import threading

from .runner import start_kubeapi


def main() -> None:
    parser = argparse.ArgumentParser(description="Kubernetes API emulator for tests")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    args = parser.parse_args()
    handle = start_kubeapi(port=args.port)
    print(handle.kubeconfig_path, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        handle.stop()


if __name__ == "__main__":
    main()
