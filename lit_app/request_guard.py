"""The client-side half of the server's request rules: `request_guard.js`, a fetch wrapper the client
root loads before LIT's main.js (lit_app/client_build.py writes it next to index.html).

LIT's client POSTs JSON without a Content-Type, which the middleware (lit_app/security.py)
refuses; the guard adds the header to same-origin POSTs, retries a 503 after its Retry-After,
and appends "Details" to one-line error bodies so that LIT's status bar shows the message.

Nothing else depends on the script's internals: only `REQUEST_GUARD_NAME` (its file name in
the client root) and `REQUEST_GUARD_JS` (its text) are read, by client_build.py. The script
is to become a TypeScript source built with the bundle; that swap changes only this module.
"""

REQUEST_GUARD_NAME = "request_guard.js"
REQUEST_GUARD_JS = r"""// Sequence Salience request guard (lit_app/request_guard.py; lit_app/client_build.py writes it).
// LIT's client POSTs JSON without a Content-Type; the server (lit_app/security.py) refuses
// such POSTs, so this adds the header to same-origin POSTs. It also retries a 503 after its
// Retry-After, and appends "Details" to one-line error bodies, which LIT's status bar needs
// to show the message instead of "Unknown error".
(function () {
  'use strict';
  if (window.__ssRequestGuard) return;
  window.__ssRequestGuard = true;
  var nativeFetch = window.fetch.bind(window);
  var MAX_RETRIES = 30;
  function sameOrigin(url) {
    try { return new URL(url, window.location.href).origin === window.location.origin; }
    catch (e) { return false; }
  }
  function sleep(ms) { return new Promise(function (resolve) { setTimeout(resolve, ms); }); }
  window.fetch = async function (input, init) {
    var isRequest = typeof Request !== 'undefined' && input instanceof Request;
    var url = isRequest ? input.url : String(input);
    var method = ((init && init.method) || (isRequest ? input.method : 'GET')).toUpperCase();
    if (method !== 'POST' || !sameOrigin(url)) return nativeFetch(input, init);
    var headers = new Headers((init && init.headers) || (isRequest ? input.headers : undefined));
    if (!headers.has('Content-Type')) headers.set('Content-Type', 'application/json');
    var opts = Object.assign({}, init || {}, {headers: headers});
    for (var attempt = 0; ; attempt++) {
      var response = await nativeFetch(isRequest ? input.clone() : input, opts);
      if (response.ok) return response;
      var retryAfter = Number(response.headers.get('Retry-After'));
      if (response.status === 503 && attempt < MAX_RETRIES && retryAfter > 0) {
        await sleep(Math.min(retryAfter, 30) * 1000);
        continue;
      }
      var text = await response.text();
      if (!/\n\nDetails:/.test(text)) {
        text = text + '\n\nDetails: HTTP ' + response.status + ' from ' + url + '; the server log has more.';
      }
      var copied = new Headers(response.headers);
      copied.delete('Content-Length');
      return new Response(text, {status: response.status, statusText: response.statusText, headers: copied});
    }
  };
})();
"""
