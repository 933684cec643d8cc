"""The pure core: what decides. Events, the state fold, the policies, the manifest, routing,
the what-if report, the event log's interface and the wire types.

Plain typed data and pure functions: the core imports the standard library, msgspec, yaml and
itself, nothing else (no I/O, no server, no model runtime). ``tests/fast/repository/test_import_rules.py``
enforces it on the source's import graph.
"""
