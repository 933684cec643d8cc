"""An encoder router's numeric routing: the index of example embeddings, the decision rules
that read it and the floor it calibrates from its own examples (numpy). It runs wherever the
router model does; the decision that follows is the core's (``nrt.core.routing``).
"""
