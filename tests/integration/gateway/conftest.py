"""A running tiny gateway stack per module (``gateway_stack``)."""

from gateway_stack import module_nrt_home, stack

__all__ = ["module_nrt_home", "stack"]
