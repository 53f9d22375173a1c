"""Planning: a request -> a planned fleet. Every validation and preflight runs here, and
nothing is created, launched or uploaded.

    planned = plan_fleet(FleetRequest(task_file="smoke", policy="honest", epochs=3))
"""

from .capacity import Capacity, survey
from .cloud_choice import use_ec2
from .code import upload_extra_src, upload_wheel
from .credentials import (
    apply_inspect_variables,
    launched_by,
    project_dotenv,
    read_dotenv,
    secret_values,
    worker_secrets,
)
from .docker_needs import DockerNeeds
from .estimate import Estimate, record_durations
from .eval_args import fleet_fields, from_eval_args
from .history import identities, longest_first, seconds_of_run
from .jobs import FleetTask, Job, TaskSpec
from .models import needs as model_needs
from .overlay import installed_site
from .planner import PlannedFleet, plan_fleet
from .preflight import docker_auth_params, docker_registry
from .request import FleetRequest, dotenv_path
from .spec import FleetSpec

__all__ = [
    "Capacity",
    "DockerNeeds",
    "Estimate",
    "FleetRequest",
    "FleetSpec",
    "FleetTask",
    "Job",
    "PlannedFleet",
    "TaskSpec",
    "apply_inspect_variables",
    "docker_auth_params",
    "docker_registry",
    "dotenv_path",
    "fleet_fields",
    "from_eval_args",
    "record_durations",
    "installed_site",
    "identities",
    "longest_first",
    "seconds_of_run",
    "launched_by",
    "model_needs",
    "plan_fleet",
    "project_dotenv",
    "read_dotenv",
    "secret_values",
    "survey",
    "upload_extra_src",
    "upload_wheel",
    "use_ec2",
    "worker_secrets",
]
