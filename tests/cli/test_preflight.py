"""Checks before launch: -e forms, --extra-src, policy/sandbox refs, worker_setup, Docker params,
run configs and the cost estimate."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from ct_fleet.cloud.prices import hourly_price
from ct_fleet.controller.planning import code, estimate, preflight, setting_plan
from ct_fleet.controller.planning.runconfig import load_run_config as _run_config
from ct_fleet.controller.planning.shipped import ShippedCode
from ct_fleet.controller.reporting import cost_so_far
from ct_fleet.errors import BadInput
from ct_fleet.settings import load_setting

REPO = Path(__file__).resolve().parents[2]


def test_env_forms():
    split = setting_plan.split_env_args
    assert split(["web", "ops"]) == [("toyarena", "web"), ("toyarena", "ops")]
    assert split(["toyarena:web", "toyarena:ops"]) == [("toyarena", "web"), ("toyarena", "ops")]
    assert split([]) == []
    # Several settings in one run, deduplicated.
    assert split(["toyarena:web", "basharena:bash", "toyarena:web"]) == [("toyarena", "web"), ("basharena", "bash")]
    with pytest.raises(BadInput, match="either prefix every -e"):
        split(["toyarena:web", "ops"])


def test_extra_src_rules(tmp_path: Path):
    a, b = tmp_path / "one" / "exp", tmp_path / "two" / "exp"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    assert [t.root for t in preflight.check_extra_src([a])] == [a.resolve()]  # local fleets ship them too
    with pytest.raises(BadInput, match="share the basename 'exp'"):
        preflight.check_extra_src([a, b])
    with pytest.raises(BadInput, match="not a directory"):
        preflight.check_extra_src([tmp_path / "missing"])


@pytest.fixture(scope="module")
def repo_sha() -> str:
    return code.code_version(REPO).sha


def test_refs_resolve_from_what_ships(tmp_path: Path, repo_sha: str):
    setting = load_setting()
    extra = tmp_path / "experiments"
    (extra / "mypkg").mkdir(parents=True)
    (extra / "mypkg" / "__init__.py").write_text("")
    (extra / "mypkg" / "policies.py").write_text("def mine(): ...\n")
    bare = ShippedCode.build(REPO, repo_sha, [])
    with_tree = ShippedCode.build(REPO, repo_sha, [extra])
    setting_plan.check_policy("honest", setting, bare)
    setting_plan.check_policy("toyarena.policies:honest", setting, bare)  # in the repo
    setting_plan.check_policy("mypkg.policies:mine", setting, with_tree)
    with pytest.raises(BadInput, match="neither tracked in this repo nor in an --extra-src root.*--extra-src DIR"):
        setting_plan.check_policy("mypkg.policies:mine", setting, bare)
    with pytest.raises(BadInput, match="--sandbox 'vmbox:vm'.*--extra-src"):
        setting_plan.check_ref("--sandbox", "vmbox:vm", with_tree)
    # Importable here is not enough: the module must ship.
    with pytest.raises(BadInput, match="neither tracked"):
        setting_plan.check_policy("os.path:join", setting, bare)
    with pytest.raises(BadInput, match="unknown policy 'sneaky'"):
        setting_plan.check_policy("sneaky", setting, bare)


def test_an_untracked_module_in_the_repo_does_not_ship(repo_sha: str):
    untracked = REPO / "tests" / f"untracked_policy_{uuid.uuid4().hex[:8]}.py"
    untracked.write_text("def pol(): ...\n")
    try:
        shipped = ShippedCode.build(REPO, repo_sha, [])
        with pytest.raises(BadInput, match="neither tracked"):
            setting_plan.check_policy(f"tests.{untracked.stem}:pol", load_setting(), shipped)
    finally:
        untracked.unlink()


def test_worker_setup_digest_follows_content(tmp_path: Path):
    tree = tmp_path / "glovebox"
    (tree / "ci").mkdir(parents=True)
    script = tree / "ci" / "setup.sh"
    script.write_text("echo one\n")
    first = preflight.worker_setup_digest("glovebox/ci/setup.sh", [tree])
    script.write_text("echo two\n")
    assert first and preflight.worker_setup_digest("glovebox/ci/setup.sh", [tree]) != first
    assert preflight.worker_setup_digest(None, []) is None
    with pytest.raises(BadInput, match="no such file"):
        preflight.worker_setup_digest("glovebox/ci/missing.sh", [tree])
    with pytest.raises(BadInput, match="<extra-src basename>/<path>"):
        preflight.worker_setup_digest("other/setup.sh", [tree])


def test_docker_registry_is_a_host_and_port():
    assert preflight.docker_registry({}) == ""
    assert preflight.docker_registry({"DOCKER_REGISTRY": "127.0.0.1:5000"}) == "127.0.0.1:5000"
    assert preflight.docker_registry({"DOCKER_REGISTRY": " ghcr.io "}) == "ghcr.io"
    for bad in ("ghcr.io/org", "-x.io", "a b", "host:port", "ghcr.io;id"):
        with pytest.raises(BadInput, match="write a registry host"):
            preflight.docker_registry({"DOCKER_REGISTRY": bad})


def test_docker_params_stay_under_their_prefix():
    assert preflight.docker_auth_params({}) == ("/linuxbench/docker-org-name", "/linuxbench/docker-org-pat")
    assert preflight.docker_auth_params({"DOCKER_ORG_PAT_SSM_PARAM": "/linuxbench/docker-org-pat2"})[1].endswith("pat2")
    with pytest.raises(BadInput, match="must stay under /linuxbench/docker-org-"):
        preflight.docker_auth_params({"DOCKER_ORG_NAME_SSM_PARAM": "/linuxbench/other"})


def test_run_config_attack_keys_win(tmp_path: Path):
    path = tmp_path / "run.yml"
    path.write_text(
        "task_file: smoke\nepochs: 2\nec2_args: {max_workers: 4, spot: true}\n"
        "attacks:\n  - {name: a, policy: attack, ec2_args: {max_workers: 9}}\n  - {name: b}\n"
    )
    options, args = _run_config(path, "a")
    assert options == {"task_file": "smoke", "epochs": 2, "policy": "attack"}
    assert args == {"max_workers": 9, "spot": True}
    assert _run_config(path, "b")[1] == {"max_workers": 4, "spot": True}
    with pytest.raises(BadInput, match="several attacks: choose one with --attack"):
        _run_config(path, None)
    with pytest.raises(BadInput, match="no attack 'c'"):
        _run_config(path, "c")
    path.write_text("ec2_args: {max_wrkers: 4}\n")
    with pytest.raises(BadInput, match="unknown --ec2-arg 'max_wrkers'"):
        _run_config(path, None)


def test_cost_estimate_and_cost_so_far(tmp_path: Path):
    est = estimate.estimate(jobs=100, workers=5, concurrency=10, seconds_per_job=600, source="x", price=0.68)
    # 100 jobs on 50 slots = 2 waves of 10 min, plus boot: ~0.35 h per worker.
    assert est.hours == pytest.approx((1200 + 65) / 3600)
    assert est.total == pytest.approx(5 * est.hours * 0.68)
    assert hourly_price("c6i.4xlarge") > 0
    assert hourly_price("x1.weird", override=1.5) == 1.5
    with pytest.raises(BadInput, match="hourly_price"):
        hourly_price("x1.weird")
    assert cost_so_far({"i-1": 0.0, "i-2": 1800.0}, 3600.0, {"i-1": 2.0, "i-2": 2.0}, {"i-2": 2700.0}) == pytest.approx(
        2.0 + 0.5
    )
    run = tmp_path / "f1"
    run.mkdir()
    (run / "durations.json").write_text(json.dumps({"setting": "toyarena", "policy": "honest", "seconds": [2.0, 4.0]}))
    assert estimate.seen_duration(tmp_path, "toyarena", "honest") == (3.0, 2)
    assert estimate.seen_duration(tmp_path, "toyarena", "attack") is None
