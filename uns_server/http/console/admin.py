"""Policies (revisions, side-by-side diff, activation) and API keys (list, create with
the secret shown once, revoke), through the same services as PolicyService/KeyService."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from uns_server.domain.enums import Role
from uns_server.domain.errors import UnsError
from uns_server.http.console.context import Console
from uns_server.http.console.diff import pretty, side_by_side
from uns_server.http.console.render import render
from uns_server.http.console.sessions import Session
from uns_server.services import keys

TYPES_MAX = 500
REVISIONS_MAX = 100


async def policy_list(request: web.Request, session: Session, c: Console) -> web.StreamResponse:
    async with c.store.read() as tx:
        types = await tx.console.policy_types(TYPES_MAX)
    return render(
        request, "policies.html", title="Policies", types=types, capped=len(types) >= TYPES_MAX
    )


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


async def policy(
    request: web.Request, session: Session, c: Console, *, problem: str = "", status: int = 200
) -> web.StreamResponse:
    name = request.match_info["type"]
    try:
        revisions, _ = await c.policies.list(name, REVISIONS_MAX)
    except UnsError as exc:
        return render(request, "error.html", status=400, title="Policies", reason=exc.message)
    if not revisions:
        return render(
            request, "error.html", status=404, title="Not found", reason=f"No policy for {name}."
        )
    numbers = [r.revision for r in revisions]
    active = next((r.revision for r in revisions if r.active), numbers[-1])
    left_n = _int(request.query.get("a")) or active
    right_n = _int(request.query.get("b")) or numbers[0]
    by_number = {r.revision: r for r in revisions}
    left, right = by_number.get(left_n), by_number.get(right_n)
    rows = (
        side_by_side(pretty(left.spec.to_json()), pretty(right.spec.to_json()))
        if left and right
        else []
    )
    return render(
        request,
        "policy.html",
        status=status,
        title=f"Policy {name}",
        name=name,
        revisions=revisions,
        left=left,
        right=right,
        rows=rows,
        problem=problem,
        done=request.query.get("done", ""),
    )


async def activate(
    request: web.Request, session: Session, form: Any, c: Console
) -> web.StreamResponse:
    name = request.match_info["type"]
    revision = _int(str(form.get("revision", "")))
    if form.get("confirm") != "yes":
        return await policy(request, session, c, status=400, problem="Tick the confirmation box.")
    try:
        await c.policies.activate(name, revision)
    except UnsError as exc:
        return await policy(request, session, c, status=409, problem=f"{exc.reason}: {exc.message}")
    c.audit(session, "activate_policy", notification_type=name, revision=revision)
    raise web.HTTPSeeOther(location=f"/console/policies/{name}?done=activated-{revision}")


async def key_list(
    request: web.Request,
    session: Session,
    c: Console,
    *,
    problem: str = "",
    status: int = 200,
    created: tuple[str, keys.KeyInfo] | None = None,
) -> web.StreamResponse:
    everything = await keys.list_all(c.store)
    return render(
        request,
        "keys.html",
        status=status,
        title="API keys",
        keys=sorted(everything, key=lambda k: (k.revoked_at is not None, k.created_at)),
        roles=[r.value for r in Role],
        problem=problem,
        created=created,
        done=request.query.get("done", ""),
    )


async def key_create(
    request: web.Request, session: Session, form: Any, c: Console
) -> web.StreamResponse:
    roles = []
    for value in form.getall("role", []):
        try:
            roles.append(Role(str(value)))
        except ValueError:
            continue
    try:
        secret, info = await keys.create(
            c.store,
            str(form.get("principal", "")),
            roles,
            str(form.get("description", "")),
            c.clock(),
            responds_for=[p for p in str(form.get("responds_for", "")).split(",") if p.strip()],
        )
    except UnsError as exc:
        return await key_list(request, session, c, status=400, problem=exc.message)
    c.audit(session, "create_key", key_id=info.id, principal=info.principal)
    return await key_list(request, session, c, created=(secret, info))


async def key_revoke(
    request: web.Request, session: Session, form: Any, c: Console
) -> web.StreamResponse:
    key_id = request.match_info["id"]
    if form.get("confirm") != "yes":
        return await key_list(request, session, c, status=400, problem="Tick the confirmation box.")
    try:
        info = await keys.revoke(c.store, key_id, c.clock())
    except UnsError as exc:
        return await key_list(request, session, c, status=409, problem=exc.message)
    c.sessions.key_revoked()
    c.audit(session, "revoke_key", key_id=info.id, principal=info.principal)
    raise web.HTTPSeeOther(location="/console/keys?done=revoked")
