"""The YAML reader of run configs and task files: plain YAML only, bounded, UTF-8."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ct_fleet.controller.planning import safe_yaml
from ct_fleet.errors import BadInput


def test_plain_yaml_reads_as_usual():
    assert safe_yaml.load("a: 1\nb: [x, y]\nc: {d: true}\n", "f.yml") == {"a": 1, "b": ["x", "y"], "c": {"d": True}}


@pytest.mark.parametrize(
    "text,message",
    [
        ("a: &x 1\nb: *x\n", r"f.yml:1: YAML anchors \(&name\) are not allowed"),
        ("base: {a: 1}\nother:\n  <<: {a: 2}\n", r"f.yml:3: YAML merge keys"),
        ("a: 1\na: 2\n", r"f.yml:2: duplicate key 'a'"),
        ("a: [1\n", r"f.yml:2: not valid YAML"),
        ("a: !!python/name:os.system\n", r"not valid YAML"),
        ("[" * 3000 + "]" * 3000, r"f.yml"),
        ("? [1, 2]\n: x\n", r"a mapping key must be text"),
    ],
)
def test_what_a_config_never_needs_is_refused(text: str, message: str):
    with pytest.raises(BadInput, match=message):
        safe_yaml.load(text, "f.yml")


def test_read_text_bounds_and_decodes(tmp_path: Path):
    path = tmp_path / "f.yml"
    path.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert safe_yaml.read_text(path, max_bytes=100, what="run config") == "a: 1\n"
    path.write_bytes(b"a: 1\n" * 100)
    with pytest.raises(BadInput, match="over the 100-byte limit"):
        safe_yaml.read_text(path, max_bytes=100, what="run config")
    path.write_bytes(b"a: 1\nb: \xff\n")
    with pytest.raises(BadInput, match=r"f.yml:2: the run config is not UTF-8"):
        safe_yaml.read_text(path, max_bytes=100, what="run config")
    path.write_bytes(b"a\x00b")
    with pytest.raises(BadInput, match="NUL bytes"):
        safe_yaml.read_text(path, max_bytes=100, what="run config")
    with pytest.raises(BadInput, match="cannot read"):
        safe_yaml.read_text(tmp_path / "missing.yml", max_bytes=100, what="run config")


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_is_refused_unread(special: str):
    with pytest.raises(BadInput, match=rf"^{special}: is a device, not a run config; give a regular file$"):
        safe_yaml.read_text(Path(special), max_bytes=100, what="run config")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path):
    fifo = tmp_path / "run.yml"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match=r"is a FIFO \(named pipe\), not a \.env file"):
        safe_yaml.read_text(fifo, max_bytes=100, what=".env file")


def test_a_directory_is_refused(tmp_path: Path):
    with pytest.raises(BadInput, match="is a directory, not a task file"):
        safe_yaml.read_text(tmp_path, max_bytes=100, what="task file")


def test_a_whole_number_beyond_64_bits_is_refused_not_a_crash():
    with pytest.raises(BadInput, match=r"f.yml:2: the number 1111111111.*120,000 characters.*beyond 64 bits"):
        safe_yaml.load("a: 1\nn: " + "1" * 120_000 + "\n", "f.yml")
    with pytest.raises(BadInput, match="beyond 64 bits"):
        safe_yaml.load(f"n: {1 << 64}\n", "f.yml")
    assert safe_yaml.load(f"n: {(1 << 64) - 1}\nm: -{1 << 63}\nh: 0x1f\n", "f.yml") == {
        "n": (1 << 64) - 1,
        "m": -(1 << 63),
        "h": 31,
    }


def test_a_bad_date_is_bad_yaml_not_a_crash():
    with pytest.raises(BadInput, match=r"f.yml: not valid YAML \(month must be in 1..12\)"):
        safe_yaml.load("when: 2024-13-01\n", "f.yml")


def test_a_huge_number_in_a_jsonl_task_file_is_bad_json_not_a_crash(tmp_path: Path):
    from ct_fleet.controller.planning.jobs import load_task_file

    path = tmp_path / "t.jsonl"
    path.write_text('{"env": "web", "main_task": "x"}\n{"env": ' + "1" * 5000 + "}\n")
    with pytest.raises(BadInput, match=r"t.jsonl:2: not valid JSON \(a number of 5,000 digits\)"):
        load_task_file(path)
