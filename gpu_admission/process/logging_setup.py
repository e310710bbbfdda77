"""Process-wide logging: one line per record, as JSON (for log collectors) or plain text.

Structured fields travel in `extra={...}` and appear as JSON keys, or as `key=value` pairs in
text mode. Callers never pass request bodies or secret values as fields.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

LOG_FORMATS = ("json", "text")
LOG_LEVELS = ("debug", "info", "warning", "error")

# Attributes every LogRecord has; anything else on a record came from `extra`.
_STANDARD_ATTRIBUTES = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


def _extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRIBUTES}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_extra_fields(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = _extra_fields(record)
        if not fields:
            return line
        pairs = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in fields.items())
        head, sep, tail = line.partition("\n")  # keep a traceback below the fields
        return f"{head} {pairs}{sep}{tail}"


class ClientRetriesAtDebug(logging.Filter):
    """urllib3 warns on every retry of every request while the API server is away ("Retrying
    (Retry(total=2, ...)) after connection broken by ...", 500+ characters, several a second with
    a few informers). The process says the outage itself, once when it begins and once when it
    ends (reachability.py), so these records become DEBUG: seen only when asked for.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and str(record.msg).startswith("Retrying"):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


# The logger urllib3's connection pools retry on (urllib3/connectionpool.py `log.warning`).
URLLIB3_RETRY_LOGGER = "urllib3.connectionpool"


def setup_logging(level: str = "info", fmt: str = "json", stream: TextIO | None = None) -> None:
    """Send every logger's records to `stream` (stderr by default) in the chosen format."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    if level.lower() not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # The kubernetes client logs every request body at DEBUG; bodies may hold Secret data.
    logging.getLogger("kubernetes").setLevel(max(root.level, logging.INFO))
    logging.getLogger("urllib3").setLevel(max(root.level, logging.INFO))
    retries = logging.getLogger(URLLIB3_RETRY_LOGGER)
    if not any(isinstance(f, ClientRetriesAtDebug) for f in retries.filters):
        retries.addFilter(ClientRetriesAtDebug())
