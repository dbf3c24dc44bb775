"""File-system access the worker cannot trust or must replace atomically: job roots written by tenants (job_root),
archives from users and object storage (safe_tar), atomic directory swaps and read-only tree removal (directories)."""
