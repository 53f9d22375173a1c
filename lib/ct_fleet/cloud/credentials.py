"""Which AWS identity a run on AWS uses.

Rules (from the operator docs): AWS_PROFILE comes from the shell, else from .env, where it
only selects an existing profile. Static keys may come from .env. Environment keys take
precedence over a profile in every AWS SDK, so having both is refused rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import BadInput

KEY_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def apply_aws_credentials(dotenv: Mapping[str, str], env: dict[str, str]) -> str:
    """Settle the credential source in `env` (a copy of the run's environment); return its
    description."""
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


def login_hint(profile: str | None) -> str:
    name = profile or "NAME"
    return (
        f"run `aws sso login --profile {name}` and set AWS_PROFILE={name} (in your shell or .env), "
        "or put AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in .env"
    )


def require_credentials(env: Mapping[str, str]) -> None:
    """Refuse, naming how to log in, when the source apply_aws_credentials chose in `env`
    yields no credentials: before anything is created, not as an SDK error mid-way."""
    import boto3
    from botocore.exceptions import BotoCoreError, ProfileNotFound

    profile = env.get("AWS_PROFILE") or None
    keys = bool(env.get("AWS_ACCESS_KEY_ID"))
    try:
        session = boto3.Session(
            profile_name=None if keys else profile,
            aws_access_key_id=env.get("AWS_ACCESS_KEY_ID") if keys else None,
            aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") if keys else None,
            aws_session_token=env.get("AWS_SESSION_TOKEN") if keys else None,
        )
        found = session.get_credentials()
        # An SSO or assumed-role profile resolves (or fails: an expired login) only here.
        frozen = found.get_frozen_credentials() if found is not None else None
    except ProfileNotFound:
        raise BadInput(
            f"AWS profile {profile!r} is not configured: create it with `aws configure sso --profile {profile}`, "
            "or set AWS_PROFILE to one you have"
        ) from None
    except BotoCoreError as exc:
        raise BadInput(
            f"AWS credentials of {profile or 'the environment'} do not load ({exc}): {login_hint(profile)}"
        ) from None
    if frozen is None or not frozen.access_key:
        raise BadInput(f"no AWS credentials: {login_hint(profile)}")
