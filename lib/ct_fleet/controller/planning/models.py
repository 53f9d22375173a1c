"""The model a fleet calls: checked before launch, and the secrets its jobs need.

Preflight refuses, with one line each: a provider Inspect does not know, a provider whose
SDK is not installed (the controller and workers share one locked environment, so what
is missing here is missing there), and a missing API key. The key (and, when set, the
provider's base URL) reaches workers as per-instance SSM secrets, like any other secret:
never on a command line, in user-data, in the manifest or in S3.

`openai-api/<service>/<model>` needs `<SERVICE>_API_KEY` and `<SERVICE>_BASE_URL`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import BadInput, plain

# provider -> (API key variables, any one of which will do; optional variables forwarded when set)
PROVIDER_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "openai": (("OPENAI_API_KEY",), ("OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID")),
    "anthropic": (("ANTHROPIC_API_KEY",), ("ANTHROPIC_BASE_URL",)),
    "google": (("GOOGLE_API_KEY", "GEMINI_API_KEY"), ("GOOGLE_BASE_URL",)),
    "mistral": (("MISTRAL_API_KEY",), ("MISTRAL_BASE_URL",)),
    "groq": (("GROQ_API_KEY",), ("GROQ_BASE_URL",)),
    "grok": (("XAI_API_KEY", "GROK_API_KEY"), ("XAI_BASE_URL", "GROK_BASE_URL")),
    "together": (("TOGETHER_API_KEY",), ("TOGETHER_BASE_URL",)),
    "fireworks": (("FIREWORKS_API_KEY",), ("FIREWORKS_BASE_URL",)),
    "openrouter": (("OPENROUTER_API_KEY",), ("OPENROUTER_BASE_URL",)),
    "perplexity": (("PERPLEXITY_API_KEY",), ("PERPLEXITY_BASE_URL",)),
    "deepseek": (("DEEPSEEK_API_KEY",), ("DEEPSEEK_BASE_URL",)),
    "moonshot": (("MOONSHOT_API_KEY",), ("MOONSHOT_BASE_URL",)),
    "sambanova": (("SAMBANOVA_API_KEY",), ("SAMBANOVA_BASE_URL",)),
    "cloudflare": (("CLOUDFLARE_API_TOKEN", "CLOUDFLARE_API_KEY"), ("CLOUDFLARE_ACCOUNT_ID",)),
    "hf-inference-providers": (("HF_TOKEN",), ()),
    "litellm-proxy": (("LITELLM_PROXY_API_KEY", "LITELLM_API_KEY"), ("LITELLM_PROXY_BASE_URL", "LITELLM_BASE_URL")),
}
# Providers that call no remote API with a key of their own.
KEYLESS = {"mockllm", "none", "hf", "vllm", "vllm-completions", "ollama", "llama-cpp-python", "sglang"}
# Never forwarded from a model's needs: workers use their own instance role for AWS.
NEVER_FORWARD = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"}


@dataclass(frozen=True)
class ModelNeeds:
    """What a model's jobs need from the launching machine's environment."""

    required: tuple[tuple[str, ...], ...]  # each: names of which one must be set
    optional: tuple[str, ...]  # forwarded when set

    def names(self, values: Mapping[str, str]) -> list[str]:
        """The variables to forward: the first set name of each requirement, and the optional ones set."""
        chosen = [
            next(n for n in group if values.get(n)) for group in self.required if any(values.get(n) for n in group)
        ]
        return [*chosen, *(n for n in self.optional if values.get(n))]


def provider_of(model: str) -> str:
    provider, sep, rest = model.partition("/")
    if not sep or not rest:
        raise BadInput(f"--model {model!r}: write provider/model, e.g. openai/gpt-4o-mini or mockllm/model")
    return provider


def needs(model: str, model_args: Mapping[str, Any]) -> ModelNeeds:
    provider = provider_of(model)
    if provider in ("openai-api", "openai-api-completions"):
        parts = model.split("/")
        if len(parts) < 3:
            raise BadInput(f"--model {model!r}: write {provider}/<service>/<model>")
        service = parts[1].upper().replace("-", "_")
        required = [(f"{service}_API_KEY",)]
        if "base_url" not in model_args:
            required.append((f"{service}_BASE_URL",))
        return ModelNeeds(tuple(required), ())
    if provider in KEYLESS:
        return ModelNeeds((), ())
    keys, optional = PROVIDER_KEYS.get(provider, ((), ()))
    return ModelNeeds((keys,) if keys else (), optional)


def check_model(
    model: str, model_args: Mapping[str, Any], values: Mapping[str, str], *, given: str | None = None
) -> list[str]:
    """Refuse what would fail on every worker; returns the secret names the jobs need.
    GIVEN is how the command named the model (--model M, --model-role R=M, a task's own)."""
    if model == "none":
        return []  # Inspect's --model none: the task calls no model
    given = given or f"--model {model}"
    provider_of(model)
    for key in model_args:
        if key in ("api_key", "token") or key.endswith("_api_key"):
            raise BadInput(
                f"{given}: {key}=...: a key never goes on the command line; put it in .env or the environment"
            )
    wanted = needs(model, model_args)
    _check_provider(model, model_args, given)
    for group in wanted.required:
        if not any(values.get(n) for n in group):
            names = " or ".join(group)
            raise BadInput(f"{given}: {names} is not set; put it in .env or export it")
    return [n for n in wanted.names(values) if n not in NEVER_FORWARD]


def _check_provider(model: str, model_args: Mapping[str, Any], given: str) -> None:
    """Build the model client as a job would (no request is sent): unknown providers and
    missing SDKs fail here. Keys were checked above; a placeholder stands in for them."""
    if provider_of(model) in ("mockllm", "none"):
        return
    from inspect_ai.model import get_model

    from ...inspect_private import PrerequisiteError

    base_url = "http://127.0.0.1:9/v1" if provider_of(model).startswith("openai-api") else None
    try:
        get_model(
            model,
            api_key="ct-fleet-preflight",
            base_url=model_args.get("base_url", base_url),
            memoize=False,
            **{k: v for k, v in model_args.items() if k != "base_url"},
        )
    except PrerequisiteError as exc:
        lines = [line.strip() for line in plain(str(exc)).splitlines() if line.strip()]
        raise BadInput(f"{given}: missing SDK: {' '.join(lines[-2:])}") from None
    except ValueError as exc:
        if "not recognized" in str(exc):
            raise BadInput(f"{given}: unknown provider {provider_of(model)!r} (Inspect does not know it)") from None
        raise BadInput(f"{given}: {exc}") from None
    except TypeError as exc:
        raise BadInput(f"{given}: bad model argument ({exc})") from None


def check_costs(model_names: list[str], job_options: Mapping[str, Any]) -> None:
    """A cost limit (--cost-limit, or a task's own) needs the prices of every model it applies
    to (Inspect's model database, or --model-cost-config's), or Inspect refuses the run as it
    starts: refused here instead. MODEL_NAMES: the models of the tasks a limit applies to."""
    from ...inspect_private import model_info_direct

    priced = set(job_options.get("model_cost_config") or {})
    missing = [
        name
        for name in dict.fromkeys(model_names)
        if name not in priced and getattr(model_info_direct(name), "cost", None) is None
    ]
    if missing:
        raise BadInput(
            f"a cost limit (--cost-limit, or a task's own) needs the prices of {', '.join(missing)}: give them "
            "with --model-cost-config FILE (YAML or JSON: model -> input, output, ... in dollars per million tokens)"
        )


def forward_names(model_names: list[str], forward_env: list[str], values: Mapping[str, str]) -> list[str]:
    """Secret names for workers: the model's plus --ec2-arg forward_env=NAME,... (each must be set)."""
    for name in forward_env:
        if name in NEVER_FORWARD:
            raise BadInput(f"forward_env={name}: AWS credentials never go to workers (they use their instance role)")
        if not values.get(name):
            raise BadInput(f"forward_env={name}: {name} is not set; put it in .env or export it")
    return list(dict.fromkeys([*model_names, *forward_env]))
