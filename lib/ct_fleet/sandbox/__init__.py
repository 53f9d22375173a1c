"""Docker sandboxes, for both sides: the images compose files name (compose), what each job
ran (digests), and removing a killed job's containers (cleanup). No AWS, no Inspect import."""
