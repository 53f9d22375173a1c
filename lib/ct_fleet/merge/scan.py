"""Pass 1 of the merge: read each input's header and summaries, keep one record per
(str(sample id), epoch) in the spool (merge/spool.py), which also holds each input's stats."""

from __future__ import annotations

import json
import logging
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..evallog import zipio
from ..evallog.layout import HEADER_JSON, JOURNAL_SUMMARIES, SAMPLES_DIR, SUMMARIES_JSON, dumps
from ..evallog.zipio import RawMember
from .identity import identity_key
from .spool import Spool
from .util import error_text, timestamp

logger = logging.getLogger("ct_fleet.merge")


@dataclass
class Group:
    """One task identity: its template header and counters; its rows live in the spool."""

    key: str
    index: int  # the group's id in the spool
    header: dict[str, Any]  # template: the first input's header (inputs sorted by path)
    spool: Spool
    files: int = 0
    samples_seen: int = 0  # sample rows read, duplicates included
    created: str = ""  # earliest eval.created over all inputs

    @property
    def duplicates_dropped(self) -> int:
        return self.samples_seen - self.spool.count_records(self.index)


def scan_file(path: Path) -> tuple[dict[str, Any], list[tuple[dict[str, Any], RawMember]]] | None:
    """Read one input's header and summaries; None (with a warning) if it is unusable."""
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zipio.live_infos(zf)
            if HEADER_JSON not in infos:
                logger.warning("skipping %s: no header.json (eval unfinished or crashed)", path)
                return None
            header = json.loads(zf.read(infos[HEADER_JSON]))
            if SUMMARIES_JSON in infos:
                rows = json.loads(zf.read(infos[SUMMARIES_JSON]))
            else:
                journal = sorted(
                    (n for n in infos if n.startswith(JOURNAL_SUMMARIES) and n.endswith(".json")),
                    key=lambda n: int(n[len(JOURNAL_SUMMARIES) : -len(".json")]),
                )
                rows = [row for n in journal for row in json.loads(zf.read(infos[n]))]
            latest: dict[tuple[str, int], dict[str, Any]] = {}
            for row in rows:  # last row per (id, epoch) wins, as in Inspect's readers
                latest[(str(row["id"]), int(row["epoch"]))] = row
            samples = []
            for row in latest.values():
                name = f"{SAMPLES_DIR}{row['id']}_epoch_{row['epoch']}.json"
                info = infos.get(name)
                if info is None:
                    logger.warning("%s: summary for %s but no sample entry; ignored", path, name)
                    continue
                samples.append((row, RawMember.from_info(info)))
            return header, samples
    except (OSError, zipfile.BadZipFile, KeyError, ValueError, TypeError, EOFError) as ex:
        logger.warning("skipping %s: unreadable .eval (%s: %s)", path, type(ex).__name__, ex)
        return None


def group_inputs(inputs: Iterable[Path], spool: Spool) -> list[Group]:
    """Pass 1: every input's header and summaries into the spool, grouped by task identity."""
    groups: dict[str, Group] = {}
    for path in spool.sorted_inputs(inputs):
        scanned = scan_file(path)
        if scanned is None:
            continue
        header, samples = scanned
        key = identity_key(header)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(key=key, index=len(groups), header=header, spool=spool)
        stats = header.get("stats") or {}
        created = header["eval"].get("created", "")
        if created and (not group.created or timestamp(created) < timestamp(group.created)):
            group.created = created
        file_index = spool.add_file(
            group.index,
            str(path),
            bool(header.get("invalidated")),
            {
                "started_at": stats.get("started_at") or "",
                "completed_at": stats.get("completed_at") or "",
                "model_usage": stats.get("model_usage") or {},
                "role_usage": stats.get("role_usage") or {},
                "connection_limit_history": stats.get("connection_limit_history") or [],
            },
        )
        group.files += 1
        for row, member in samples:
            group.samples_seen += 1
            spool.add_record(
                group.index,
                row["id"],
                int(row["epoch"]),
                file_index,
                error_text(row.get("error")),
                timestamp(row.get("completed_at")),
                dumps(row),
                member,
            )
    return list(groups.values())
