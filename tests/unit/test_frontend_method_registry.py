"""The method list the TypeScript tests and the browser harness feed the modules
(frontend/test/fixtures/method_registry.json) is the one the server publishes to the browser.

The modules read method names, labels, signedness and count fields from the salience model's
output spec (`spec.output.method_registry.default`); their tests use this fixture in its place.
A method added, renamed or relabelled in the core registry (sequence_salience.methods) or a LIT
fact changed (lit_app.schema.method_registry) fails here until the fixture follows:

    python -c "import json; from lit_app.schema import method_registry as m; \
print(json.dumps(m.published_registry(), indent=2, ensure_ascii=False))" > frontend/test/fixtures/method_registry.json
"""

from __future__ import annotations

import json
import pathlib

from lit_app.schema import fields, method_registry

FIXTURE = pathlib.Path(__file__).resolve().parents[2] / "frontend" / "test" / "fixtures" / "method_registry.json"


def test_the_frontend_fixture_is_the_published_registry():
    assert json.loads(FIXTURE.read_text("utf-8")) == method_registry.published_registry()


def test_the_salience_spec_publishes_it_under_the_field_the_modules_read():
    # frontend/src/shared/methods.ts reads spec.output[METHOD_REGISTRY_FIELD].default.
    ts = (FIXTURE.parents[2] / "src" / "shared" / "methods.ts").read_text("utf-8")
    assert f"METHOD_REGISTRY_FIELD = '{fields.METHOD_REGISTRY}'" in ts
    published = fields.SALIENCE_OUTPUT_SPEC[fields.METHOD_REGISTRY].default
    assert published == json.loads(FIXTURE.read_text("utf-8"))
