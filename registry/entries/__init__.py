"""One module per metric, each holding SPEC, its MetricSpec; registry/catalog.py lists them in order."""
