"""Launch backend `local`: `train` as sandboxed processes on the worker."""
