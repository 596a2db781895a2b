/**
 * Every document the sources point to exists, and every quoted section of one is a heading
 * there: a comment saying "see docs/architecture.md, "Frontend rooms"" must lead somewhere.
 * (element.ts once said "see DESIGN.md", a file that is not in the repository.) The same for
 * the repository files and folders they name (lit_app/wrappers/inside.py, sequence_salience/aggregate/).
 */
/// <reference types="vite/client" />
import {describe, expect, it} from 'vitest';

/** The sources, by path relative to the repository root. */
const SOURCES = byRepoPath(import.meta.glob<string>(['../src/**/*.ts', './support/**/*.ts'],
                                                    {query: '?raw', import: 'default', eager: true}));
/** Every Markdown file a source may name: the repository's top level and docs/. */
const DOCS = byRepoPath(import.meta.glob<string>(['../../*.md', '../../docs/**/*.md'],
                                                 {query: '?raw', import: 'default', eager: true}));

/** Every file of the repository a source may name (paths only; nothing is read). */
const REPO_FILES = [...byRepoPath(Object.fromEntries(Object.keys(import.meta.glob([
  '../../sequence_salience/**/*', '../../lit_app/**/*', '!../../lit_app/client_root/**', '../../tests/**/*',
  '../../benchmarks/**/*', '../../frontend/src/**/*', '../../frontend/test/**/*',
])).map((k) => [k, '']))).keys()];

function byRepoPath(files: Record<string, string>): Map<string, string> {
  const out = new Map<string, string>();
  for (const [path, text] of Object.entries(files)) {
    const parts = ['frontend', 'test'];
    for (const seg of path.split('/')) {
      if (seg === '..') parts.pop();
      else if (seg !== '.') parts.push(seg);
    }
    out.set(parts.join('/'), text);
  }
  return out;
}

/** The text with comment leaders (" * ", "// ") folded away, so that a reference may span lines. */
function flat(text: string): string {
  return text.replace(/\n\s*(?:\*(?!\/)|\/\/)?\s*/g, ' ');
}

/** [file, path as written, quoted section or null] for every Markdown path named in the sources. */
function docReferences(): Array<[string, string, string | null]> {
  const out: Array<[string, string, string | null]> = [];
  for (const [file, text] of SOURCES) {
    for (const m of flat(text).matchAll(/([A-Za-z0-9_./-]+\.md)\b(?:,?\s*(?:section\s*)?["“]([^"”]+)["”])?/g)) {
      out.push([file, m[1], m[2] ?? null]);
    }
  }
  return out;
}

/** [file, path] for every repository path (a file, or a folder ending in "/") named in the sources. */
function repoReferences(): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  const re = /(?<![\w./-])((?:sequence_salience|lit_app|tests|benchmarks|frontend)\/[A-Za-z0-9_./-]*[A-Za-z0-9_/])/g;
  for (const [file, text] of SOURCES) {
    for (const m of flat(text).matchAll(re)) out.push([file, m[1]]);
  }
  return out;
}

function headings(doc: string): string[] {
  return doc.split('\n').filter((l) => /^#{1,6} /.test(l)).map((l) => l.replace(/^#+ /, ''));
}

describe('documents named in frontend sources', () => {
  const refs = docReferences();

  it('finds the sources, the documents and the references it checks', () => {
    expect(SOURCES.has('frontend/src/index.ts') && DOCS.has('docs/architecture.md') && DOCS.has('README.md')).toBe(true);
    expect(refs.some(([, path, section]) => path === 'docs/architecture.md' && section !== null)).toBe(true);
  });

  it('names files that exist in the repository, relative to its root', () => {
    const missing = refs.filter(([, path]) => !DOCS.has(path)).map(([f, p]) => `${f}: ${p}`);
    expect(missing).toEqual([]);
  });

  it('quotes sections that are headings of that file', () => {
    const missing = refs.filter(([, path, section]) => section !== null && DOCS.has(path) &&
                                    !headings(DOCS.get(path)!).some((h) => h.startsWith(section)))
        .map(([f, p, s]) => `${f}: ${p} "${s}"`);
    expect(missing).toEqual([]);
  });

  it('names repository files and folders that exist', () => {
    const refs = repoReferences();
    expect(refs.some(([, p]) => p === 'lit_app/wrappers/inside.py')).toBe(true);
    const missing = refs.filter(([, p]) => p.endsWith('/') ? !REPO_FILES.some((f) => f.startsWith(p))
                                                           : !REPO_FILES.includes(p)).map(([f, p]) => `${f}: ${p}`);
    expect(missing).toEqual([]);
  });
});
