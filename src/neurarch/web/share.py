"""``neurarch-trace MODEL --share`` with ``NEURARCH_SERVER`` set: hand the
report's input to a neurarch server and print its permalink.

* a local config (a ``config.json`` or a model folder): the config and the
  options are posted to ``POST /api/v1/paste``; the server computes the
  report and answers with the permalink;
* a catalog or Hub id: the permalink is the model's page with the options as
  query parameters (the server computes it on the first visit).

Only JSON travels: a ``python:`` spec cannot be shared (the server never runs Python).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from ..errors import NeurarchError
from . import options as O

TIMEOUT_S = 30


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={"content-type": "application/json", "accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            msg = json.loads(e.read())["error"]["message"]
        except Exception:  # not our error shape: say what came back
            msg = f"HTTP {e.code}"
        raise NeurarchError(f"--share: the server refused it: {msg}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise NeurarchError(f"--share: cannot reach NEURARCH_SERVER {url.split('/api/')[0]} ({getattr(e, 'reason', e)})") from None


def share(report, opts, server: str) -> str:
    """The permalink of ``report`` (made with ``opts``) on ``server``."""
    server = server.rstrip("/")
    if not server.startswith(("http://", "https://")):
        raise NeurarchError(f"NEURARCH_SERVER must be an http(s) URL, got {server!r}")
    values = O.from_options(opts)
    m = report.model
    if m.source == "local":
        path = Path(m.id)
        cfg_path = path / "config.json" if path.is_dir() else path
        try:
            config = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise NeurarchError(f"--share: cannot read {cfg_path} ({e})") from None
        answer = _post(f"{server}/api/v1/paste", {"config": config, "options": values})
        return server + answer["url"]
    if m.source in ("python",):
        raise NeurarchError("--share: a python: model cannot go to a server (the server never runs Python); share the HTML page instead")
    defaults = O.normalize({})
    query = []
    for f in O.fields():
        v = values.get(f.name)
        if v == defaults.get(f.name):
            continue
        if isinstance(v, list):
            query.append((f.name, ",".join(map(str, v))))
        elif isinstance(v, dict):
            query.append((f.name, ",".join(f"{k}={x}" for k, x in v.items())))
        elif isinstance(v, bool):
            query.append((f.name, "true" if v else "false"))
        elif v is not None:
            query.append((f.name, str(v)))
    if opts.revision:
        query.insert(0, ("revision", opts.revision))
    q = urllib.parse.urlencode(query)
    return f"{server}/models/{m.id}" + (f"?{q}" if q else "")
