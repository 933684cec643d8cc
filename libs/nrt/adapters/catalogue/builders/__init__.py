"""One module per catalogue recipe; heavy export libraries are imported inside the build functions."""
