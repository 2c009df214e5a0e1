"""How a node logs (``--log-level``, ``--log-format``): to stderr, as text or as JSON lines.

- ``text``: one line per record, ``<time> <LEVEL> <logger>: <message>`` (a traceback, when
  there is one, follows on its own lines).
- ``json``: one JSON object per line, whatever the message holds, for log shippers (Vector,
  Fluent Bit, Promtail) to read without multi-line rules. Its keys: ``time`` (ISO 8601 in
  UTC with milliseconds, ``2026-11-26T14:47:16.123Z``), ``level``, ``logger``, ``message``
  (the message with its arguments filled in), ``exc_info`` (the formatted traceback) and
  ``stack_info`` when the record has them, and every field passed as
  ``log.info(..., extra={...})``. Values JSON has no type for are written as ``str()``;
  an extra field named like one of the keys above goes under ``extra_<name>``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Final

__all__ = ["LOG_FORMATS", "TEXT_FORMAT", "JsonFormatter", "configure_logging"]

LOG_FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# What every record has (and what Formatter.format adds to it): any other attribute of a
# record came from `extra=`.
_RECORD_ATTRIBUTES: Final = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None))
) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            # Cached on the record, as logging.Formatter does, for other handlers.
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc_info"] = record.exc_text
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES:
                out[f"extra_{key}" if key in out else key] = value
        try:
            return json.dumps(out, default=str, allow_nan=False)
        except ValueError:
            # A NaN, or a value that contains itself: every value as its text instead.
            return json.dumps({key: _text(value) for key, value in out.items()})

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{seconds}.{int(record.msecs):03d}Z"


def _text(value: Any) -> Any:
    return value if isinstance(value, str | int | bool) or value is None else str(value)


def configure_logging(level: str, fmt: str) -> None:
    """Send every log record of `level` (a level name, e.g. ``INFO``) and above to stderr,
    formatted as `fmt` (``text`` or ``json``). Replaces the root logger's handlers, as
    ``logging.basicConfig(force=True)`` does."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
