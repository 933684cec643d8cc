"""Running the whole stack on one machine: ``nrt up``."""
