"""Every wire format between the controller and the workers; no AWS client code here.

- keys: S3 keys, queue names, SSM paths derived from a fleet id
- messages: work, done and heartbeat messages (versioned)
- manifest: the fleet manifest and the one place work messages are built
- fleet_env: the settings a worker boots with (fleet.env), with one set of defaults
- user_data: the EC2 user-data that carries fleet.env and the boot kit to a worker
- steplog: the bash step lines (lib/bash/ct.sh) of worker and AMI logs, and their parser
- stop: the end-of-run signal (a stop message on the work queue, a marker in S3)
- masking: secret values out of text that is reported or shown
- knobs: every fleet knob, defined once (knob_rules: their value rules; knob_parsing: values
  from --ec2-arg and run configs; knob_env: to and from fleet.env)
- sizing: how many workers a fleet starts with
- run_layout: the names in a run directory, runs/<fleet_id>/
"""

from . import knobs, run_layout
from .fleet_env import START_CONCURRENCY, FleetEnv
from .keys import (
    QUEUE_ROLES,
    artifact_key,
    done_marker_key,
    extra_src_key,
    fleet_of_queue,
    lease_key,
    log_key,
    logs_prefix,
    manifest_key,
    queue_names,
    result_job_id,
    result_key,
    secret_bundle,
    secrets_prefix,
)
from .knobs import Ec2Config
from .manifest import MANIFEST_SCHEMA, BadManifest, Manifest, ManifestJob, ManifestTask
from .masking import mask
from .messages import (
    LOST,
    LOST_USAGE,
    SCHEMA,
    BadMessage,
    DoneMessage,
    Held,
    Outcome,
    Resumed,
    WorkMessage,
    decode_reports,
    encode_reports,
    lost_usage,
)

__all__ = [
    "LOST",
    "LOST_USAGE",
    "MANIFEST_SCHEMA",
    "QUEUE_ROLES",
    "SCHEMA",
    "START_CONCURRENCY",
    "DoneMessage",
    "Ec2Config",
    "FleetEnv",
    "Held",
    "Manifest",
    "ManifestJob",
    "ManifestTask",
    "Outcome",
    "Resumed",
    "WorkMessage",
    "artifact_key",
    "done_marker_key",
    "BadManifest",
    "BadMessage",
    "decode_reports",
    "encode_reports",
    "extra_src_key",
    "knobs",
    "fleet_of_queue",
    "lease_key",
    "log_key",
    "lost_usage",
    "logs_prefix",
    "manifest_key",
    "mask",
    "queue_names",
    "result_job_id",
    "result_key",
    "run_layout",
    "secret_bundle",
    "secrets_prefix",
]
