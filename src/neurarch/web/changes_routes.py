"""What changed upstream, on the web: pages over the revision tracker's store.

    GET /changes                      every tracked repo and its latest changes (HTML; .json twin at /changes.json)
    GET /changes/{id}                 one repo's history (HTML); /changes/{id}.md and /changes/{id}.json twins
    GET /changes/{id}/osv.json        its OSV records (a JSON array)
    GET /osv/{osv_id}.json            one OSV record

``{id}`` is what ``neurarch-trace changes`` was given (``org/name`` for the Hub).
These pages read the store only: a repo appears once ``neurarch-trace changes ID``
has read it (with the same database, ``--store URL``).  Errors use the app's one
error shape (404 ``not_found`` for a repo or record the store does not hold).
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool

from ..changes import osv, render, storage
from .errors import ApiError

router = APIRouter()

_PAGE = """{% extends "base.html" %}
{% block title %}{{ title }} — neurarch{% endblock %}
{% block body %}
<h1>{{ title }}</h1>
{% if h %}
<p class="meta">{{ h.revisions|length }} revisions read, {{ h.changes|length }} changes · source <a href="{{ h.url }}">{{ h.url }}</a>
 · <a href="{{ base }}/changes/{{ h.repo }}.md">Markdown</a> · <a href="{{ base }}/changes/{{ h.repo }}.json">JSON</a>
 · <a href="{{ base }}/changes/{{ h.repo }}/osv.json">OSV</a></p>
{% if h.truncated %}<p class="bad">The commit list was cut short: older revisions were not read.</p>{% endif %}
{% if h.rewritten %}<p class="bad">History rewritten: {{ h.rewritten|length }} commit(s) read before are gone; their changes are marked.</p>{% endif %}
<div class="table"><table><tr><th>Date</th><th>Commit</th><th>Kind</th><th>What changed</th><th>OSV</th></tr>
{% for c, rid in rows %}<tr{% if c.vanished %} class="meta"{% endif %}><td>{{ c.date.date().isoformat() }}</td><td><code>{{ c.commit[:12] }}</code></td>
<td>{{ kinds[c.kind] }}</td><td>{{ c.summary }}{% if c.fixed %} <span class="ok">(put back by <code>{{ c.fixed[:12] }}</code>)</span>{% endif %}
{% if c.vanished %} <span class="bad">(commit gone from the history)</span>{% endif %}
{% if c.details or c.findings or c.template_diff %}<details><summary>details</summary><ul>{% for d in c.details %}<li>{{ d }}</li>{% endfor %}
{% for f in c.findings %}<li class="bad">{{ f }}</li>{% endfor %}</ul>{% if c.template_diff %}<pre>{{ c.template_diff }}</pre>{% endif %}</details>{% endif %}</td>
<td><a href="{{ base }}/osv/{{ rid }}.json">{{ rid }}</a></td></tr>{% endfor %}
</table></div>
{% else %}
<div class="table"><table><tr><th>Repo</th><th>Source</th><th>Revisions</th><th>Changes</th><th>Latest</th></tr>
{% for r in repos %}<tr><td><a href="{{ base }}/changes/{{ r.repo }}">{{ r.repo }}</a></td><td>{{ r.source }}</td><td class="num">{{ r.revisions }}</td>
<td class="num">{{ r.changes }}</td><td>{{ r.latest }}</td></tr>{% endfor %}
</table></div>
{% if not repos %}<p>No repo tracked yet: run <code>neurarch-trace changes ORG/NAME</code> with this server's database.</p>{% endif %}
{% endif %}
{% endblock %}
"""


def _engine(request: Request):
    state = request.app.state.neurarch
    if "engine" not in state:
        raise ApiError(503, "not_ready", "the server is starting")
    return state["engine"]


def _template():
    from . import pages

    return pages.env().from_string(_PAGE)


def _index(engine) -> list[dict]:
    from sqlalchemy import select

    from ..store.changes import TrackedRepo
    from ..store.db import session

    with session(engine) as s:
        names = [(r.name, r.source) for r in s.scalars(select(TrackedRepo).order_by(TrackedRepo.name))]
    out = []
    for name, source in names:
        h = storage.stored_history(name, source, engine=engine)
        if h is None:  # untracked between the two reads
            continue
        out.append({"repo": name, "source": source, "revisions": len(h.revisions), "changes": len(h.changes), "latest": h.changes[0].summary if h.changes else "—"})
    return out


def changes_badge(request: Request, repo_id: str) -> dict:
    """The fields of the ``changes`` shields badge: how many changes the store holds for the repo
    (those whose commits vanished from a rewritten history not counted) and the latest one's date."""
    h = storage.stored_history(repo_id, None, _engine(request))
    if h is None:
        return {"label": "upstream changes", "message": "not tracked", "color": "lightgrey"}
    live = [c for c in h.changes if not c.vanished]
    if not live:
        return {"label": "upstream changes", "message": f"none in {len(h.revisions)} revisions", "color": "brightgreen"}
    latest = max(c.date for c in live).date().isoformat()
    return {"label": "upstream changes", "message": f"{len(live)} since first read, latest {latest}", "color": "blue"}


@router.get("/changes", response_class=HTMLResponse, summary="Every tracked model repo (What changed upstream)")
async def changes_index(request: Request):
    repos = await run_in_threadpool(_index, _engine(request))
    return HTMLResponse(_template().render(base="", title="What changed upstream", h=None, repos=repos))


@router.get("/changes.json", summary="Every tracked model repo, as JSON")
async def changes_index_json(request: Request):
    return JSONResponse({"repos": await run_in_threadpool(_index, _engine(request))})


@router.get(
    "/changes/{repo_id:path}",
    summary="One repo's revisions and typed changes (HTML; .md and .json twins; /osv.json for its OSV records)",
    responses={404: {"description": "The store holds no such repo"}},
)
async def changes_page(request: Request, repo_id: str):
    want_osv = repo_id.endswith("/osv.json")
    fmt = "html"
    if want_osv:
        repo_id = repo_id[: -len("/osv.json")]
    elif repo_id.endswith(".json"):
        repo_id, fmt = repo_id[:-5], "json"
    elif repo_id.endswith(".md"):
        repo_id, fmt = repo_id[:-3], "md"
    if not repo_id or len(repo_id) > 512:
        raise ApiError(400, "bad_model_id", "name a tracked repo, e.g. /changes/org/name", "id")
    h = await run_in_threadpool(storage.stored_history, repo_id, None, _engine(request))
    if h is None:
        raise ApiError(404, "not_found", f"{repo_id!r} is not tracked yet: run `neurarch-trace changes {repo_id}` with this server's database")
    if want_osv:
        return JSONResponse(osv.records(h))
    if fmt == "json":
        return JSONResponse(json.loads(h.model_dump_json()))
    if fmt == "md":
        from . import pages

        return PlainTextResponse(pages.markdown_safe(render.markdown(h)), media_type="text/markdown; charset=utf-8")
    rows = [(c, osv.record_id(h.url, c)) for c in h.changes]
    return HTMLResponse(_template().render(base="", title=f"What changed upstream: {h.repo}", h=h, rows=rows, kinds=osv.KIND_TITLE, repos=[]))


@router.get("/osv/{osv_id}.json", summary="One OSV record by its id", responses={404: {"description": "No such record"}})
async def osv_record(request: Request, osv_id: str):
    if not osv_id.startswith(osv.ID_PREFIX) or len(osv_id) > 64:
        raise ApiError(404, "not_found", f"no OSV record {osv_id!r} (neurarch's ids start with {osv.ID_PREFIX})")
    found = await run_in_threadpool(storage.find_osv, osv_id, _engine(request))
    if found is None:
        raise ApiError(404, "not_found", f"no OSV record {osv_id!r}")
    h, change = found
    dates = {r.commit: r.date for r in h.revisions}
    return JSONResponse(osv.to_osv(change, h, dates.get(change.fixed) if change.fixed else None))
