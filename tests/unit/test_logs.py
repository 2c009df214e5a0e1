"""`--log-format`: text lines as before, or one JSON object per line with the record's
time, level, logger, message, traceback and extra fields."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from vdl.logs import TEXT_FORMAT, JsonFormatter, configure_logging


def _record(
    msg: str,
    *args: object,
    level: int = logging.INFO,
    exc_info: Any = None,
    extra: dict[str, Any] | None = None,
) -> logging.LogRecord:
    logger = logging.getLogger("vdl.test")
    record = logger.makeRecord("vdl.test", level, "f.py", 7, msg, args, exc_info, extra=extra)
    record.created = 1_795_704_436.123456  # 2026-11-26T14:47:16.123Z
    record.msecs = 123.456
    return record


def _json(record: logging.LogRecord) -> dict[str, Any]:
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed: dict[str, Any] = json.loads(line)
    return parsed


def test_a_record_has_time_level_logger_and_message() -> None:
    out = _json(_record("partition %s-%d led", "orders", 3, level=logging.WARNING))
    assert out == {
        "time": "2026-11-26T14:47:16.123Z",
        "level": "WARNING",
        "logger": "vdl.test",
        "message": "partition orders-3 led",
    }


def test_newlines_and_quotes_stay_on_one_line() -> None:
    message = 'first line\nsecond "quoted" line\r\n\ttab \\ backslash é'
    assert _json(_record("%s", message))["message"] == message


def test_an_exception_gives_its_traceback() -> None:
    try:
        raise ValueError("bad value")
    except ValueError:
        record = _record("failed", level=logging.ERROR, exc_info=sys.exc_info())
    out = _json(record)
    assert out["message"] == "failed"
    assert out["exc_info"].startswith("Traceback (most recent call last):")
    assert out["exc_info"].rstrip().endswith("ValueError: bad value")


def test_extra_fields_appear_json_safe() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque!"

    extra = {
        "peer": "10.0.0.1:9092",
        "partition": 3,
        "lag": 0.5,
        "tags": ["a", "b"],
        "obj": Opaque(),
        "nan": float("nan"),
        "time": "not the record's",
    }
    out = _json(_record("hello", extra=extra))
    assert out["peer"] == "10.0.0.1:9092" and out["partition"] == 3
    assert out["obj"] == "opaque!"
    # A NaN is not JSON: the values are written as text rather than break the line.
    assert out["nan"] == "nan" and out["lag"] == "0.5"
    assert out["time"] == "2026-11-26T14:47:16.123Z"
    assert out["extra_time"] == "not the record's"
    plain = _json(_record("hello", extra={"lag": 0.5, "tags": ["a"], "obj": Opaque()}))
    assert (plain["lag"], plain["tags"], plain["obj"]) == (0.5, ["a"], "opaque!")


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The root logger, restored afterwards (pytest's capture handlers included)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_configure_json_to_stderr(
    root_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    configure_logging("debug", "json")
    assert root_logger.level == logging.DEBUG
    assert len(root_logger.handlers) == 1
    logging.getLogger("vdl.node").debug("up on %d", 9092, extra={"node_id": 1})
    line = stderr.getvalue()
    assert line.count("\n") == 1
    out = json.loads(line)
    assert (out["level"], out["logger"], out["message"], out["node_id"]) == (
        "DEBUG",
        "vdl.node",
        "up on 9092",
        1,
    )


def test_configure_text_keeps_the_old_format(
    root_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    configure_logging("INFO", "text")
    handler = root_logger.handlers[0]
    assert handler.formatter is not None and handler.formatter._fmt == TEXT_FORMAT
    logging.getLogger("vdl.node").debug("hidden")
    logging.getLogger("vdl.node").info("shown")
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO vdl\.node: shown\n", stderr.getvalue()
    )


def test_unknown_format_is_refused(root_logger: logging.Logger) -> None:
    with pytest.raises(ValueError, match="expected one of text, json"):
        configure_logging("INFO", "yaml")
