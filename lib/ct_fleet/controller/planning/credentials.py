"""Who launches a fleet, the .env file, and the secrets a fleet hands to workers.

Which AWS credentials a run uses is the cloud's business (cloud/credentials.py).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError, NoCredentialsError, SSOError, TokenRetrievalError
from dotenv import find_dotenv
from dotenv.parser import parse_stream

from ...errors import BadInput
from ...protocol import mask
from .safe_yaml import read_text

# Always forwarded when set (the operator docs' list); a fleet adds what its model needs
# (controller/models.py) and --ec2-arg forward_env names.
SECRET_NAMES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GH_TOKEN", "DOCKER_ORG_NAME", "DOCKER_ORG_PAT")


DOTENV_MAX_BYTES = 1 << 20
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def read_dotenv(path: Path) -> dict[str, str]:
    """KEY=value lines as python-dotenv reads them (export, quotes, comments, CRLF, a BOM).

    Values are taken literally (no ${VAR} expansion): a secret is passed on exactly as written.
    """
    if not path.exists():
        return {}
    text = read_text(path, max_bytes=DOTENV_MAX_BYTES, what=".env file").replace("\r\n", "\n")
    values: dict[str, str] = {}
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        if binding.error:
            raise BadInput(f"{path}:{line}: not a KEY=value line; quote the value or comment the line out with #")
        if binding.key is None or binding.value is None:
            continue  # a comment, a blank line, or a bare KEY
        if not ENV_NAME.fullmatch(binding.key):
            raise BadInput(f"{path}:{line}: {binding.key!r} is not a variable name (letters, digits and _)")
        values[binding.key] = binding.value
    return values


def project_dotenv() -> Path | None:
    """The .env `inspect eval` reads when started here: the first one from the working directory up."""
    found = find_dotenv(usecwd=True)
    return Path(found) if found else None


def read_dotenvs(own: Path, project: Path | None) -> dict[str, str]:
    """ct-fleet's .env (CT_FLEET_DOTENV), and what the project's .env (project_dotenv) adds to
    it: a direct `inspect eval` there reads its model keys from it. A key both set is ct-fleet's
    own. Left out of the project's: its AWS_* lines, so that a project's file never decides
    which AWS account the fleet runs in (the shell and ct-fleet's own .env do), and its
    INSPECT_* lines, which are options (apply_inspect_variables), not secrets: an argument that
    repeats one (-T grader=<its INSPECT_EVAL_MODEL>) is not refused as a secret's."""
    found = read_dotenv(project) if project is not None else {}
    values = {name: value for name, value in found.items() if not name.startswith(("INSPECT_", "AWS_"))}
    values.update(read_dotenv(own))
    return values


def apply_inspect_variables(project: Path | None, environ: MutableMapping[str, str]) -> None:
    """The project .env's INSPECT_* lines set in `environ` where the shell has not set them, as
    `inspect eval` sets them before it reads its options (INSPECT_EVAL_MODEL, ...); a relative
    INSPECT_LOG_DIR there is relative to the file, as Inspect takes it."""
    if project is None:
        return
    for name, value in read_dotenv(project).items():
        if not name.startswith("INSPECT_") or name in environ:
            continue
        if name == "INSPECT_LOG_DIR" and "://" not in value and not Path(value).is_absolute():
            value = (project.parent / value).resolve().as_posix()
        environ[name] = value


def launched_by(sts: Any, profile: str | None = None) -> str:
    """The LaunchedBy tag: the IAM user name, or the session name of an assumed (SSO) role.
    `profile` is the AWS profile the client uses, named in the fix when its session expired."""
    profile = profile or "your-profile"
    try:
        arn = sts.get_caller_identity()["Arn"]
    except (SSOError, TokenRetrievalError) as exc:
        raise BadInput(f"AWS SSO session expired or missing: run `aws sso login --profile {profile}` ({exc})") from None
    except NoCredentialsError:
        raise BadInput("no AWS credentials: set AWS_PROFILE (SSO) or put fleet keys in .env") from None
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if "ExpiredToken" in code:
            raise BadInput(f"AWS session expired: run `aws sso login --profile {profile}`") from None
        raise
    return name_from_arn(arn)


def name_from_arn(arn: str) -> str:
    """user/<name> for IAM users; assumed-role/<role>/<session> (the SSO user name) for roles."""
    return arn.rsplit("/", 1)[-1]


def probe_keys(dotenv: Mapping[str, str]) -> dict[str, str]:
    """What of the .env files a task's probe loads with (under the shell's own): what a direct
    `inspect eval` would have in its environment, but AWS credentials, which no job gets, and
    the interpreter's own variables (PYTHONHOME, ...), which would change how a fresh
    interpreter starts where a direct run loads them only once it has."""
    return {name: value for name, value in dotenv.items() if not name.startswith(("AWS_", "PYTHON"))}


def secret_values(dotenv: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """Where secrets are read from: the shell first, else .env."""
    return {**dotenv, **{k: v for k, v in environ.items() if v}}


def refuse_secret_args(secrets: Mapping[str, str], args: list[tuple[str, Mapping[str, Any]]]) -> None:
    """BadInput for an argument whose value holds a secret's: arguments are written in clear
    (the manifest, its copy in S3, the merged log's header); a secret goes by environment."""
    for flag, given in args:
        for name, value in given.items():
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            held = [key for key, secret in secrets.items() if mask(text, [secret]) != text]
            if held:
                raise BadInput(
                    f"{flag} {name}: its value holds the secret {held[0]}'s, and arguments are written in clear "
                    f"(the manifest, the logs): let the task read {held[0]} from its environment instead"
                )


def worker_secrets(
    dotenv: Mapping[str, str], environ: Mapping[str, str], names: tuple[str, ...] | list[str] = ()
) -> dict[str, str]:
    """Secrets for workers: from the shell, else .env. Only SECRET_NAMES and `names` ever leave."""
    out = {}
    for name in dict.fromkeys([*SECRET_NAMES, *names]):
        value = environ.get(name) or dotenv.get(name)
        if value:
            out[name] = value
    return out
