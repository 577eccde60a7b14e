"""Messages whose JSON is made ahead: a big file's code lenses and diagnostics (thousands, mostly the same
from one edit to the next) are encoded once per kernel and joined, where pygls would unstructure and
encode every one of them for every message (100 ms and some 30,000 short-lived objects for the lenses of
a 50,000-line file, whose collection then paused other requests; 50 ms for its diagnostics, on the event
loop).

`Encoded` is a list of lsprotocol objects that carries its JSON; `EncodedReplies`, the protocol, sends that
JSON for a reply whose result is one and for published diagnostics that are one, and everything else as
pygls does.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError
from pygls.protocol import JsonRPCResponseMessage, LanguageServerProtocol, default_converter

logger = logging.getLogger(__name__)

T = TypeVar("T")

_CONVERTER = default_converter()  # pygls's own, so the JSON is what pygls would have sent
_writing: set[asyncio.Future[Any]] = set()  # kept until done: asyncio holds tasks weakly
_SPLICE = "\0encoded\0"  # where the encoded part goes: no message holds a NUL character otherwise
# No spaces after `,` and `:`: a 50,000-line file's lenses are a megabyte, which the editor decodes after
# every edit, and the spaces were a tenth of it.
_COMPACT = (",", ":")


class Encoded(list[T]):
    """The objects of a reply, and `json`: their encoding, as pygls's would be (without its spaces)."""

    def __init__(self, items: Iterable[T], encoded: str) -> None:
        super().__init__(items)
        self.json = encoded


def unstructure(value: object) -> Any:
    """`value` as JSON-ready dicts and lists, by pygls's converter."""
    return _CONVERTER.unstructure(value)


def encode(value: object) -> str:
    """`value`'s JSON, as pygls would send it but for the spaces between items."""
    return json.dumps(unstructure(value), separators=_COMPACT)


_LINE = "\0line\0"  # where a part's line goes in its JSON


def line_template(items: Sequence[object]) -> list[str]:
    """The JSON of `items` (each with a one-line `range`), without the list's brackets, split where their
    line goes: `str(line).join(template)` is their JSON at that line, for parts that an edit moved."""
    unstructured = unstructure(items)
    for item in unstructured:
        item["range"]["start"]["line"] = item["range"]["end"]["line"] = _LINE
    return json.dumps(unstructured, separators=_COMPACT)[1:-1].split(json.dumps(_LINE))


class EncodedReplies(LanguageServerProtocol):
    """Sends an `Encoded` result, or published diagnostics, as its JSON spliced into the message."""

    def _send_data(self, data: Any) -> None:
        found = _with_encoded_part(data)
        if found is None:
            super()._send_data(data)
            return
        unstructured, encoded = found
        self._send_body(json.dumps(unstructured).replace(json.dumps(_SPLICE), encoded.json, 1))

    def _send_body(self, body: str) -> None:
        """What pygls's `_send_data` does with the body it encoded."""
        if self.writer is None:
            logger.error("Unable to send data, no available transport!")
            return
        try:
            encoded = body.encode(self.CHARSET)
            if self._include_headers:
                header = (
                    f"Content-Length: {len(encoded)}\r\n"
                    f"Content-Type: {self.CONTENT_TYPE}; charset={self.CHARSET}\r\n\r\n"
                )
                encoded = header.encode(self.CHARSET) + encoded
            written = self.writer.write(encoded)
            if inspect.isawaitable(written):  # a websocket's write
                future = asyncio.ensure_future(written)
                _writing.add(future)
                future.add_done_callback(_writing.discard)
        except BrokenPipeError:
            logger.exception("Error sending data. BrokenPipeError", exc_info=True)
            raise
        except Exception as error:
            logger.exception("Error sending data", exc_info=True)
            self._server._report_server_error(error, JsonRpcInternalError)


def _with_encoded_part(message: Any) -> tuple[dict[str, Any], Encoded[Any]] | None:
    """The message as JSON-ready dicts with a mark where its `Encoded` part goes, and that part; None for a
    message without one."""
    if isinstance(message, JsonRPCResponseMessage) and isinstance(message.result, Encoded):
        return {"id": message.id, "jsonrpc": message.jsonrpc, "result": _SPLICE}, message.result
    params = getattr(message, "params", None)
    if isinstance(params, types.PublishDiagnosticsParams) and isinstance(params.diagnostics, Encoded):
        published: dict[str, Any] = {"uri": params.uri, "diagnostics": _SPLICE}
        if params.version is not None:
            published["version"] = params.version
        return {"method": message.method, "jsonrpc": message.jsonrpc, "params": published}, params.diagnostics
    return None
