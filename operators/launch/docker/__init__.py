"""Launch backend `docker`: one container per host on the Docker engine."""
