"""Model hosting: the jobs of a process that hosts models, run by specialist_worker and router_svc.

``worker.Worker`` ties them together: ``presence`` (heartbeats), ``tiers`` and ``control`` (the
tier changes cluster_state orders), ``serving`` (generate, classify, embed), ``model_host`` (the
models and their runtimes), ``resources`` and ``device_memory`` (what the host has), ``remote``
(the remote tier) and ``offline_router`` (the router model outside a worker, for what-if). They
reach the bus only through ``shell_ports``; the services are the shells around them.
"""
