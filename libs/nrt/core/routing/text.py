"""What the entry model classifies: the text of the request's current turn."""

from __future__ import annotations

from collections.abc import Sequence

from nrt.core.protocol import ChatMessage


def routing_text(messages: Sequence[ChatMessage]) -> str:
    """The last user message: each turn of a conversation is routed on what it asks now.

    Raises ValueError when there is no user message (the gateway rejects those requests).
    """
    for message in reversed(messages):
        if message.role == "user":
            return message.content
    raise ValueError("a routed request needs at least one user message")
