"""The launch layer: base types, the backend registry, outcome markers, log streams, resource names."""
