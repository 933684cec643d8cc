"""Developer tools run from the repository (not shipped in the wheel)."""
