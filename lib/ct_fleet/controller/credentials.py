"""Which AWS identity a fleet runs as, and the secrets it hands to workers.

Rules (from the operator docs): AWS_PROFILE comes from the shell, else from .env, where it
only selects an existing profile. Static keys may come from .env. Environment keys take
precedence over a profile in every AWS SDK, so having both is refused rather than guessed.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError, NoCredentialsError, SSOError, TokenRetrievalError
from dotenv.parser import parse_stream

from ..errors import BadInput
from .safe_yaml import read_text

SECRET_NAMES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GH_TOKEN", "DOCKER_ORG_NAME", "DOCKER_ORG_PAT")
KEY_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


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


def apply_aws_credentials(dotenv: dict[str, str], environ: dict[str, str] | None = None) -> str:
    """Settle the credential source in `environ` (os.environ by default); return its description."""
    env = os.environ if environ is None else environ
    profile = env.get("AWS_PROFILE") or dotenv.get("AWS_PROFILE")
    keys_in_shell = any(env.get(k) for k in KEY_VARS)
    keys_in_dotenv = any(dotenv.get(k) for k in KEY_VARS)
    if profile and (keys_in_shell or keys_in_dotenv):
        where = "your shell" if keys_in_shell else ".env"
        raise BadInput(
            f"AWS_PROFILE={profile} and AWS_ACCESS_KEY_ID are both set: remove the AWS_ACCESS_KEY_ID/"
            f"AWS_SECRET_ACCESS_KEY lines from {where} to use the profile, or unset AWS_PROFILE to use the keys"
        )
    if profile:
        env["AWS_PROFILE"] = profile
        return f"profile {profile}"
    if keys_in_dotenv and not keys_in_shell:
        for key in (*KEY_VARS, "AWS_SESSION_TOKEN"):
            if dotenv.get(key):
                env[key] = dotenv[key]
        return "static keys from .env"
    return "static keys from the environment" if keys_in_shell else "default credential chain"


def launched_by(sts: Any) -> str:
    """The LaunchedBy tag: the IAM user name, or the session name of an assumed (SSO) role."""
    try:
        arn = sts.get_caller_identity()["Arn"]
    except (SSOError, TokenRetrievalError) as exc:
        profile = os.environ.get("AWS_PROFILE", "your-profile")
        raise BadInput(f"AWS SSO session expired or missing: run `aws sso login --profile {profile}` ({exc})") from None
    except NoCredentialsError:
        raise BadInput("no AWS credentials: set AWS_PROFILE (SSO) or put fleet keys in .env") from None
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if "ExpiredToken" in code:
            profile = os.environ.get("AWS_PROFILE", "your-profile")
            raise BadInput(f"AWS session expired: run `aws sso login --profile {profile}`") from None
        raise
    return name_from_arn(arn)


def name_from_arn(arn: str) -> str:
    """user/<name> for IAM users; assumed-role/<role>/<session> (the SSO user name) for roles."""
    return arn.rsplit("/", 1)[-1]


def worker_secrets(dotenv: dict[str, str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """Secrets for workers: from the shell, else .env. Only names in SECRET_NAMES ever leave."""
    env = os.environ if environ is None else environ
    out = {}
    for name in SECRET_NAMES:
        value = env.get(name) or dotenv.get(name)
        if value:
            out[name] = value
    return out
