"""The ``nrt`` command line."""
