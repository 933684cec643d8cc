"""The pure routing core: which model answers a chat request, and why.

No I/O here. ``router_svc`` asks the entry model for label scores and calls this core;
the gateway uses ``resolve_model`` to tell routed from direct calls. The label set
always comes from the manifest: scores for any other label are dropped.

The nearest-centroid index (numpy) is in ``nrt.routing.centroid``, imported by whoever
scores embeddings; this package stays light for the gateway.
"""

from nrt.routing.decision import (
    Decision,
    ModelCall,
    Scored,
    classify_request,
    decide,
    resolve_model,
    restrict,
)
from nrt.routing.placement import serving_workers
from nrt.routing.text import routing_text

__all__ = [
    "Decision",
    "ModelCall",
    "Scored",
    "classify_request",
    "decide",
    "resolve_model",
    "restrict",
    "routing_text",
    "serving_workers",
]
