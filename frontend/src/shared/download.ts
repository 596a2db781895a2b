/**
 * Files the browser saves: a plain name for an export, and the download itself (an object URL clicked
 * through a hidden link; nothing leaves the machine). Used by the heatmap's exports and "Share this view".
 */

/** A file name for an export of `what` (letters, digits, dashes). */
export function exportName(what: string, ext: string): string {
  const base = what.toLowerCase().replace(/[^a-z0-9]+/gu, '-').replace(/^-|-$/gu, '').slice(0, 60);
  return `${base || 'salience'}.${ext}`;
}

/** Hands `blob` to the browser as a download named `name`. */
export function download(name: string, blob: Blob) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.style.display = 'none';
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
