"""Property-based tests generated from the app's own OpenAPI (schemathesis,
in-process over ASGI): every route, the paste form (its form body is declared
in the OpenAPI) and the revision tracker's pages included; no 5xx, every
status documented, every response matching its schema.  The workers ask a
local, empty Hub (127.0.0.1), so an id that looks like a Hub id is a real "not
found" (404), not "unreachable".  Examples are bounded so the run stays short."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis import checks  # noqa: E402
from web_fixtures import hub_env  # noqa: E402

from hubserver import FakeHub  # noqa: E402
from neurarch.web.app import Settings, create_app  # noqa: E402

_HUB = FakeHub().start()
_TMP = Path(tempfile.mkdtemp(prefix="neurarch-st-"))
_APP = create_app(Settings(db_url=f"sqlite:///{_TMP}/n.db", workers=1, time_limit_s=60, worker_env=hub_env(_HUB.endpoint, _TMP)))

schema = schemathesis.openapi.from_asgi("/openapi.json", _APP)
# Fuzzing only (bounded by max_examples); the coverage phase would add hundreds of cases per operation.
schema.config.phases.update(phases=["examples", "fuzzing"])

CHECKS = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance, checks.response_schema_conformance]


@pytest.fixture(scope="module", autouse=True)
def _stop_hub():
    yield
    _HUB.stop()


@schema.parametrize()
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_from_its_openapi(case):
    case.call_and_validate(checks=CHECKS, headers={"accept": "application/json"})
