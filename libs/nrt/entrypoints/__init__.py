"""Entrypoints: what starts processes. The ``nrt`` command (``cli``), the one-command stack that
supervises the services (``stack``) and the runtime every service process shares (``service``).

Entrypoints may import every layer below them; nothing below imports them.
"""
