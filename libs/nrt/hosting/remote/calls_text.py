"""A remote endpoint's tool calls written in NRT's text format (``nrt.core.tool_calls``), whole or from
its streamed pieces, so the gateway reads them as it reads a local model's. Whatever the wire."""

from __future__ import annotations

from nrt.core.tool_calls import CALL_SEPARATOR, call_header, call_text


class CallsText:
    """The endpoint's streamed tool-call deltas written in NRT's text format, piece by piece."""

    def __init__(self) -> None:
        self.open: int | None = None  # the index of the call being written

    def delta(self, index: int, name: str | None, arguments: str | None) -> str:
        """The text a delta of call ``index`` adds (its header when it is the call's first)."""
        out = ""
        if index != self.open:
            if self.open is not None:
                out += "}" + CALL_SEPARATOR
            out += call_header(name or "")
            self.open = index
        return out + (arguments or "")

    def end(self) -> str:
        """The text that closes the last call."""
        return "}" if self.open is not None else ""


def calls_answer(calls: list[tuple[str, str]]) -> str:
    """A whole answer's calls ``(name, arguments)`` in NRT's text format."""
    return CALL_SEPARATOR.join(call_text(name, arguments) for name, arguments in calls)
