"""The obstore engine: Rust object_store on one event loop, on the botocore engine's connection (see
operators/storage/__init__.py)."""
