"""The pure routing core: which model answers a chat request, and why.

No I/O here. ``router_svc`` asks the entry model for label scores and calls this core;
the gateway uses ``resolve_model`` to tell routed from direct calls. The label set
always comes from the manifest: scores for any other label are dropped. An encoder
router's numeric side (the example index, the decision rules, the calibrated floor: numpy)
is model hosting, in ``nrt.hosting.embeddings``; what it scores comes back here as ``Scored``.
"""

from nrt.core.routing.affinity import (
    Target,
    choose_worker,
    previous_specialist,
    rendezvous,
    session_holder,
    stay_on_specialist,
)
from nrt.core.routing.decision import (
    Decision,
    ModelCall,
    choose_route,
    classify_request,
    resolve_model,
    restrict,
)
from nrt.core.routing.examples import IntentExamples, examples_digest, intent_examples, router_examples
from nrt.core.routing.hosts import serving_workers
from nrt.core.routing.likelihood import (
    NONE_LABEL,
    classification_prompt,
    likelihood_calibration,
    likelihood_scores,
)
from nrt.core.routing.scored import Scored
from nrt.core.routing.text import routing_text
from nrt.core.routing.threshold import Threshold, threshold_in_force

__all__ = [
    "NONE_LABEL",
    "Decision",
    "IntentExamples",
    "ModelCall",
    "Scored",
    "Target",
    "Threshold",
    "choose_route",
    "choose_worker",
    "classification_prompt",
    "classify_request",
    "examples_digest",
    "intent_examples",
    "likelihood_calibration",
    "likelihood_scores",
    "previous_specialist",
    "rendezvous",
    "resolve_model",
    "restrict",
    "router_examples",
    "routing_text",
    "serving_workers",
    "session_holder",
    "stay_on_specialist",
    "threshold_in_force",
]
