"""Adapters: what talks to the world. NATS (``bus``), the event stores (``store``), ONNX Runtime
(``inference``), model sources and preparation (``catalogue``), servers and ports (``infra``),
metrics, traces, settings read from the environment.

Adapters import the core and one another, never ``nrt.hosting``, ``nrt.entrypoints`` or a service.
"""
