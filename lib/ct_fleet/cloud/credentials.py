"""Which AWS identity a run on AWS uses.

Rules (from the operator docs): AWS_PROFILE comes from the shell, else from .env, where it
only selects an existing profile. Static keys may come from .env. Environment keys take
precedence over a profile in every AWS SDK, so having both is refused rather than guessed.
"""

from __future__ import annotations

import os

from ..errors import BadInput

KEY_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


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
