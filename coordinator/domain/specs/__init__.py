"""The cluster spec's items: fingerprints, templates, outputs, and the rules a spec sent must
keep."""
