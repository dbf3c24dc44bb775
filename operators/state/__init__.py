"""The platform's own records of a job (outside its job root): state directory, lease, retention."""
