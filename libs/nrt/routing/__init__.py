"""The pure routing core: which model answers a chat request, and why.

No I/O here. ``router_svc`` asks the entry model for label scores and calls this core;
the gateway uses ``resolve_model`` to tell routed from direct calls. The label set
always comes from the manifest: scores for any other label are dropped.
"""

from nrt.routing.centroid import CentroidIndex, build_index, nearest
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
    "CentroidIndex",
    "Decision",
    "ModelCall",
    "Scored",
    "build_index",
    "classify_request",
    "decide",
    "nearest",
    "resolve_model",
    "restrict",
    "routing_text",
    "serving_workers",
]
