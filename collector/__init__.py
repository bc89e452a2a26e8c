"""The collector behind server.py: payload validation, storage, the JSON/Prometheus API and the
dashboard. server.py wires these into a Flask app (create_app) and serves it with waitress."""
