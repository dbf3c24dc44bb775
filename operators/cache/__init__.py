"""The shared data cache: filling entries, their pins and eviction, and a job's views of them."""
