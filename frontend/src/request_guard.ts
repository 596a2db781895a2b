/**
 * The client-side half of the server's request rules, built by esbuild into
 * dist/request_guard.js (a second entry besides the bundle) and loaded by the
 * client root before LIT's main.js (lit_app/serving/client_build.py,
 * lit_app/serving/request_guard.py serve it).
 *
 * LIT's client POSTs JSON without a Content-Type; the server (lit_app/edge/security.py)
 * refuses such POSTs, so this adds the header to same-origin POSTs. It also retries a
 * 503 after its Retry-After, and appends "Details" to one-line error bodies, which
 * LIT's status bar needs to show the message instead of "Unknown error".
 *
 * Every same-origin POST also carries the page's client id (`CLIENT_HEADER`, one id per page load):
 * work belongs to the client that asked, so "latest selection wins" holds within this page only, and
 * another tab, notebook or person on the same server never cancels this page's work (lit_app/edge/clients.py).
 */

/** Most retries of one request answered 503 with a Retry-After. */
export const MAX_RETRIES = 30;
/** Longest wait between two tries, seconds (a larger Retry-After is cut to it). */
export const MAX_RETRY_AFTER_S = 30;

/** The header naming the page's client (lit_app/edge/clients.py `CLIENT_HEADER`, the same text). */
export const CLIENT_HEADER = 'X-Sequence-Salience-Client';

/**
 * A fresh client id: 32 hex digits from `crypto.getRandomValues` (which, unlike `crypto.randomUUID`, a page
 * served over plain http to another machine has too), else from Math.random.
 */
export function newClientId(): string {
  const bytes = new Uint8Array(16);
  if (typeof crypto !== 'undefined' && typeof crypto.getRandomValues === 'function') {
    crypto.getRandomValues(bytes);
  } else {
    for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(Math.random() * 256);
  }
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

declare global {
  interface Window {
    __ssRequestGuard?: boolean;
  }
}

/** The page's address (window.location). */
export interface PageLocation {
  href: string;
  origin: string;
}

function sameOrigin(url: string, page: PageLocation): boolean {
  try {
    return new URL(url, page.href).origin === page.origin;
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** `fetch` wrapped with the rules above, for a page at `page` whose client id is `clientId`. */
export function guardedFetch(nativeFetch: typeof fetch, page: PageLocation, clientId = ''): typeof fetch {
  return async function (input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
    const isRequest = typeof Request !== 'undefined' && input instanceof Request;
    const url = isRequest ? (input as Request).url : String(input);
    const method = (init?.method || (isRequest ? (input as Request).method : 'GET')).toUpperCase();
    if (method !== 'POST' || !sameOrigin(url, page)) return nativeFetch(input, init);
    const headers = new Headers(init?.headers || (isRequest ? (input as Request).headers : undefined));
    if (!headers.has('Content-Type')) headers.set('Content-Type', 'application/json');
    if (clientId !== '' && !headers.has(CLIENT_HEADER)) headers.set(CLIENT_HEADER, clientId);
    const opts: RequestInit = {...(init ?? {}), headers};
    for (let attempt = 0; ; attempt++) {
      const response = await nativeFetch(isRequest ? (input as Request).clone() : input, opts);
      if (response.ok) return response;
      const retryAfter = Number(response.headers.get('Retry-After'));
      if (response.status === 503 && attempt < MAX_RETRIES && retryAfter > 0) {
        await sleep(Math.min(retryAfter, MAX_RETRY_AFTER_S) * 1000);
        continue;
      }
      let text = await response.text();
      if (!/\n\nDetails:/.test(text)) {
        text = `${text}\n\nDetails: HTTP ${response.status} from ${url}; the server log has more.`;
      }
      const copied = new Headers(response.headers);
      copied.delete('Content-Length');
      return new Response(text, {status: response.status, statusText: response.statusText, headers: copied});
    }
  };
}

if (typeof window !== 'undefined' && !window.__ssRequestGuard) {
  window.__ssRequestGuard = true;
  window.fetch = guardedFetch(window.fetch.bind(window), window.location, newClientId());
}
