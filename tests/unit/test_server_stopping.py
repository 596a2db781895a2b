"""A request cancelled because the server is stopping is answered 503, not "200 []" (issue 43).

The app (lit_app/server.py `build_app`) over a stub LIT model whose prediction is cancelled, served through
the middleware (`security.SecureApp`) with werkzeug's test client. tests/integration/test_robustness.py's
Ctrl-C test checks the same on a real server process (there the request may also be closed unanswered).
"""

from __future__ import annotations

import json

import pytest
from lit_nlp.api import model as lit_model
from lit_nlp.api import types as lit_types
from werkzeug.test import Client

from lit_app.serving import client_build
from lit_app.data import datasets
from lit_app.edge import disconnect, security, security_config
from lit_app import server
from lit_app.errors import ClientGone

PORT = 5432


class _CancelledModel(lit_model.Model):
    """Every prediction ends as a request does whose cancel check fired with the client gone."""

    def input_spec(self):
        return {"prompt": lit_types.TextSegment()}

    def output_spec(self):
        return {"score": lit_types.Scalar()}

    def predict(self, inputs, **unused_kw):
        raise ClientGone("Cancelled: the client went away before every salience matrix was computed.")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    bundle = tmp_path_factory.mktemp("dist") / client_build.BUNDLE_NAME
    bundle.write_text("// stub\n", encoding="utf-8")
    root = client_build.build_client_root(str(tmp_path_factory.mktemp("root")), bundle_path=str(bundle))
    app = server.build_app({"stub": _CancelledModel()}, datasets.get_datasets(), root)
    return Client(security.SecureApp(app, security_config.SecurityConfig(port=PORT)), use_cookies=False)


def _post(client):
    body = json.dumps({"inputs": [{"id": "r", "data": {"prompt": "Hello"}}]})
    return client.post("/get_preds?model=stub", data=body, content_type="application/json",
                       headers={"Host": f"127.0.0.1:{PORT}"})


def test_a_request_whose_client_went_away_is_answered_nothing(client):
    answer = _post(client)
    assert answer.status_code == 200 and json.loads(answer.data) == [], answer.data  # nobody reads it


def test_a_request_the_stopping_server_cancelled_is_a_503(client, monkeypatch):
    monkeypatch.setattr(disconnect, "stopping", lambda: True)
    answer = _post(client)
    text = answer.get_data(as_text=True)
    assert answer.status_code == 503, text
    assert "server is stopping" in text and "Fix" in text and "\n" not in text, text
