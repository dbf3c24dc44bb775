"""Launch backend `kubernetes`: one Indexed Job per training job."""
