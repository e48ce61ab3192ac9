"""``uns-admin dlq``: list, replay and resolve dead letters over the public API."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from uns.v1 import types_pb2 as t
from uns_clients import AsyncClient, DeadlineExceeded, UnsError
from uns_server.cli.remote.output import (
    EXIT_FAILURE,
    EXIT_OK,
    FATAL,
    Stop,
    as_dict,
    describe,
    fatal_message,
    one_line,
    print_json,
    state_name,
    table,
    when,
)

DLQ_FILTER = "state = FAILED AND dead_letter = true"


def _dlq_filter(notification_type: str | None) -> str:
    if not notification_type:
        return DLQ_FILTER
    return f'{DLQ_FILTER} AND notification_type = "{notification_type}"'


async def _dead_letters(client: AsyncClient, notification_type: str | None) -> list[t.Notification]:
    return [n async for n in client.list(filter=_dlq_filter(notification_type), page_size=1000)]


async def cmd_dlq_list(client: AsyncClient, args: argparse.Namespace) -> int:
    found = await _dead_letters(client, args.type)
    if args.json:
        print_json([as_dict(n) for n in found])
        return EXIT_OK
    if found:
        table(
            ("ID", "TYPE", "PRINCIPAL", "SOURCE", "ATTEMPTS", "CYCLE", "UPDATED", "ERROR"),
            (
                (
                    n.id,
                    n.notification_type,
                    n.principal,
                    n.source,
                    str(n.attempts),
                    str(n.cycle),
                    when(n.update_time),
                    one_line(n.outcome.error_message, 60) or "-",
                )
                for n in found
            ),
        )
    kind = f" of type {args.type}" if args.type else ""
    print(f"{len(found)} dead letter{'s' if len(found) != 1 else ''}{kind}", file=sys.stderr)
    return EXIT_OK


@dataclass
class ItemResult:
    """What happened (or would happen) to one id of a batch."""

    notification_id: str
    action: str  # replayed, resolved, would replay, would resolve, refused, would refuse
    detail: str
    ok: bool
    error: UnsError | None = None
    notification: t.Notification | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "notification_id": self.notification_id,
            "outcome": self.action.replace(" ", "_"),
            "ok": self.ok,
            "detail": self.detail,
        }
        if self.error is not None:
            out["error"] = {
                "reason": self.error.reason,
                "message": self.error.message,
                "metadata": self.error.metadata,
            }
        if self.notification is not None:
            out["notification"] = as_dict(self.notification)
        return out


async def _act(
    client: AsyncClient, nid: str, replay: bool, reason: str, *, dry_run: bool
) -> ItemResult:
    """Replay or resolve one id; a dry run asks the server what it would answer
    (``validate_only``: every check it would run, nothing written)."""
    try:
        if replay:
            n = await client.replay(nid, reason=reason, validate_only=dry_run)
            if dry_run:
                detail = f"cycle {n.cycle - 1} -> {n.cycle}, {n.notification_type}: {n.title}"
                return ItemResult(nid, "would replay", one_line(detail, 120), True, None, n)
            return ItemResult(
                nid, "replayed", f"cycle {n.cycle}, state {state_name(n)}", True, None, n
            )
        n = await client.resolve_failure(nid, reason=reason, validate_only=dry_run)
        if dry_run:
            detail = f"dead_letter cleared, stays FAILED, {n.notification_type}: {n.title}"
            return ItemResult(nid, "would resolve", one_line(detail, 120), True, None, n)
        detail = f"dead_letter cleared, state {state_name(n)}"
        return ItemResult(nid, "resolved", detail, True, None, n)
    except FATAL:
        raise
    except DeadlineExceeded as exc:
        detail = describe(exc)
        if not dry_run:
            detail += " (the server may still have acted: check with `show`)"
        return ItemResult(nid, "failed", detail, False, exc)
    except UnsError as exc:
        return ItemResult(nid, "would refuse" if dry_run else "refused", describe(exc), False, exc)


async def cmd_dlq_bulk(client: AsyncClient, args: argparse.Namespace) -> int:
    replay = args.dlq_command == "replay"
    if args.all:
        ids = [n.id for n in await _dead_letters(client, args.type)]
    else:
        ids = list(dict.fromkeys(args.ids))
    results: list[ItemResult] = []
    stopped: UnsError | None = None
    for nid in ids:
        try:
            result = await _act(client, nid, replay, args.reason, dry_run=args.dry_run)
        except FATAL as exc:
            stopped = exc
            break
        results.append(result)
        if not args.json:
            print(f"{nid}  {result.action:<13}  {result.detail}", flush=True)
    if args.json:
        print_json([o.to_json() for o in results])
    done = sum(o.ok for o in results)
    refused = len(results) - done
    verb = "replay" if replay else "resolve"
    if args.dry_run:
        summary = f"dry run: would {verb} {done}, would refuse {refused}; nothing changed"
    else:
        summary = f"{'replayed' if replay else 'resolved'} {done}, refused or failed {refused}"
    if not ids:
        summary = "no dead letters" + (f" of type {args.type}" if args.type else "")
    if stopped is not None:
        message = fatal_message("dlq", stopped, client.config.target)
        if results:
            message += f"; stopped after {len(results)} of {len(ids)} ({summary})"
        elif not args.dry_run:
            message += "; nothing was changed"
        raise Stop(message)
    print(summary, file=sys.stderr)
    return EXIT_FAILURE if refused else EXIT_OK
