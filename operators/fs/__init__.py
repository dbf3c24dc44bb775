"""File-system access the worker cannot trust: job roots written by tenants (job_root)."""
