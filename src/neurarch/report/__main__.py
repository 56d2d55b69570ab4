"""python -m neurarch.report > docs/report.schema.json"""

import json

from . import Report

print(json.dumps(Report.model_json_schema(), indent=2))
