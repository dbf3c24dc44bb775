"""Hooks own all I/O: object storage, the data cache, and the launch backends."""
