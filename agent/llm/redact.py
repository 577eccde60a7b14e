"""API keys kept out of logs: the language server's debug log records what clients send, and a client may
send `cudaAgent.llm.apiKey` (pygls logs the answer to workspace/configuration at DEBUG)."""

from __future__ import annotations

import logging
import re

# "apiKey": "...", 'api_key': '...', api-key=..., x-api-key: ... (JSON, Python reprs, headers)
_KEY_VALUE = re.compile(r"""(api[-_]?key['"]?\s*[:=]\s*['"]?)([^'"\s,}\]]+)""", re.IGNORECASE)
REDACTED = "<redacted>"


def redact(text: str) -> str:
    return _KEY_VALUE.sub(lambda m: m.group(1) + REDACTED, text)


class RedactSecrets(logging.Filter):
    """A handler filter: the record's message with key values replaced, whichever logger wrote it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return True
