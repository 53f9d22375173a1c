"""The entries of an Inspect `.eval` zip (inspect_ai 0.3.285) and how they are serialised."""

from __future__ import annotations

import json
import re
from typing import Any

HEADER_JSON = "header.json"

SUMMARIES_JSON = "summaries.json"


REDUCTIONS_JSON = "reductions.json"


START_JSON = "_journal/start.json"


JOURNAL_SUMMARIES = "_journal/summaries/"


SAMPLES_DIR = "samples/"


SAMPLE_NAME = re.compile(r"^samples/(?P<id>.+)_epoch_(?P<epoch>\d+)\.json$")


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
