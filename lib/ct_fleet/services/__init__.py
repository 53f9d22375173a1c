"""Thin boto3 wrappers, one per AWS service the fleet uses; shared by both sides.

- session: clients with the shared retry policy (endpoint from AWS_ENDPOINT_URL)
- queues: the work / done / dead-letter queues, batched calls
- store: S3 bucket, manifest, code artifacts, results, logs
- instances: EC2 launch with tags and user-data, listing, teardown, AMI lookup
- secrets: per-instance SSM SecureStrings
- stop: the end-of-run signal (marker in S3, stop message on the work queue)
"""
