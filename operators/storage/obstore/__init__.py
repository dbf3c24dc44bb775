"""The obstore engine: Rust object_store on one event loop, on the connection both engines share (see
operators/storage/__init__.py)."""
