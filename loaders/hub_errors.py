"""huggingface_hub's and the network's errors, in words a researcher can act on, and whether
trying again could help: missing, private or gated repositories, unknown revisions, refused
tokens and access are permanent; throttling, server errors and unreachable hubs are not. The
token is never part of a message (huggingface_hub's own messages never carry it either)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from gpu_admission.datasets.source import DEFAULT_REVISION, DataSource


class HubFailure(Exception):
    """A load that cannot go on: the cause in words, and whether trying again could help."""

    def __init__(self, cause: str, permanent: bool) -> None:
        super().__init__(cause)
        self.cause, self.permanent = cause, permanent


@contextlib.contextmanager
def classified(source: DataSource, token: str | None) -> Iterator[None]:
    """Turns any error inside the block into a HubFailure (describe_hub_error)."""
    try:
        yield
    except HubFailure:
        raise
    except Exception as error:
        cause, permanent = describe_hub_error(error, source, token is not None)
        raise HubFailure(cause, permanent) from error


def describe_hub_error(
    error: BaseException, source: DataSource, has_token: bool
) -> tuple[str, bool]:
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    kind = "dataset" if source.repo_type == "dataset" else "model"
    repo = source.bucket
    token_hint = (
        "check that the huggingface-credential's token may read it"
        if has_token
        else "if it is private, name a huggingface-credential Secret with data-credentials"
    )
    checks: list[tuple[Callable[[BaseException], bool], str, bool]] = [
        (
            lambda e: isinstance(e, GatedRepoError),
            f"the {kind} {repo} is gated: "
            + (
                "the token's account must accept its conditions (or be granted access) on the "
                "Hub, then load again"
                if has_token
                else "name a huggingface-credential Secret whose account has accepted its "
                "conditions on the Hub"
            ),
            True,
        ),
        (
            lambda e: isinstance(e, RepositoryNotFoundError),
            f"the Hub has no {kind} repository {repo}, or it is private: check the name "
            f"(datasets are hf://datasets/org/name); {token_hint}",
            True,
        ),
        (
            lambda e: isinstance(e, RevisionNotFoundError),
            f"{repo} has no revision {source.revision or DEFAULT_REVISION!r}: name an existing "
            "branch, tag or commit",
            True,
        ),
        (
            lambda e: isinstance(e, RemoteEntryNotFoundError),
            f"a file of {repo} listed at this commit is missing on the Hub; load again",
            True,
        ),
        (
            lambda e: _status(e) == 401,
            "the Hub rejected the token; check HF_TOKEN in the huggingface-credential Secret",
            True,
        ),
        (
            lambda e: _status(e) == 403,
            f"access denied: the token may not read {repo}; give it read access",
            True,
        ),
        (
            lambda e: _status(e) in (429, 500, 502, 503, 504),
            "the Hub is throttling requests or briefly unavailable (retried)",
            False,
        ),
        (
            lambda e: "CERTIFICATE_VERIFY_FAILED" in str(e),
            "the hub's TLS certificate is not trusted by the loader: if it uses a private CA, "
            "put that CA in the bundle named by dataset.trusted_ca_config_map",
            True,
        ),
        (
            lambda e: isinstance(e, OSError) and getattr(e, "errno", None) in (28, 122),
            "the volume is full; request more storage for the PVC",
            True,
        ),
        (
            lambda e: isinstance(e, OSError) and getattr(e, "errno", None) in (13, 30),
            "the loader cannot write to the volume; check the volume's permissions",
            True,
        ),
        (
            lambda e: isinstance(e, HfHubHTTPError) and 400 <= (_status(e) or 0) < 500,
            f"the Hub refused the request ({_status(error)})",
            True,
        ),
        (
            lambda e: isinstance(e, LocalEntryNotFoundError) or _is_network(e),
            "the Hub could not be reached; check dataset.huggingface_endpoint and the network",
            False,
        ),
    ]
    detail = _first_line(error)
    for test, words, permanent in checks:
        if test(error):
            return f"{words} (huggingface_hub: {detail})", permanent
    return f"the download failed (huggingface_hub: {detail})", False


def _status(error: BaseException) -> int | None:
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _is_network(error: BaseException) -> bool:
    import httpx2

    return isinstance(error, httpx2.TransportError | TimeoutError | ConnectionError)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return (lines[0] if lines else type(error).__name__)[:300]
