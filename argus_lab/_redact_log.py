"""Secrets never reach a log (invariant 7): Argus's loggers mask what they pass on.

A log line names what failed, and what failed may quote a secret: an API's
error body echoing the key (``count_tokens failed (...)``), a tool's exception
in a traceback. Each of Argus's loggers masks a record's message and its
traceback before any handler sees it, against the env's secrets and every
secret this process's sessions know (``known_secrets``).
"""

from __future__ import annotations

import logging

__all__ = ["LOGGERS", "mask_logs"]

LOGGERS = (
    "argus_lab",
    "argus_lab.client",
    "argus_lab.langgraph",
    "argus_lab.server",
    "argus_lab.state",
)
"""Every logger Argus logs through (a test checks no module uses another):
a logger's filters see only the records logged through it, not its children's."""


class _Masking(logging.Filter):
    """Masks secrets in a record's message and traceback, in place."""

    def filter(self, record: logging.LogRecord) -> bool:
        from argus_lab.redact import Redactor, known_secrets

        red = Redactor(known_secrets())
        try:
            message = record.getMessage()
        except Exception:  # a bad format: logging itself reports it
            return True
        if red.needed(message):
            record.msg, record.args = red.text(message), None
        if record.exc_info and not record.exc_text:
            # Formatted here, as a handler's Formatter would (it reuses
            # exc_text), so that the traceback is masked too.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text and red.needed(record.exc_text):
            # The exception itself goes: a handler formatting it again (or
            # sending it with its frames' locals) would show the secret.
            record.exc_text, record.exc_info = red.text(record.exc_text), None
        if record.stack_info and red.needed(record.stack_info):
            record.stack_info = red.text(record.stack_info)
        return True


_FILTER = _Masking()


def mask_logs() -> None:
    """Puts the masking filter on each of Argus's loggers (once)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
