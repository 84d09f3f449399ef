// Where a snippet comes from and which file it is for; how a result reads. No `vscode` import:
// unit-tested with node's runner. Fences and first-line path comments are read the way the server
// reads them (lsp_server/snippets.py), so the file offered first is the one the server would pick.

const FENCE = /^ {0,3}(`{3,}|~{3,})(.*)$/;
const PATH = String.raw`(?:[\w.@-]+/)*[\w@-][\w.@-]*\.[A-Za-z]\w{0,9}`;
const INFO_WORD = new RegExp(String.raw`^(?:(?:title|file|filename|path)=)?["']?(${PATH})["']?$`);
const COMMENT_PATH = new RegExp(
  String.raw`^\s*(?:#|//|--|;|/\*|<!--)\s*(?:(?:file|filename|filepath|path)\s*:\s*)?\x60?(${PATH})\x60?\s*(?:\*/|-->)?\s*$`,
  "i",
);

const splitLines = (text: string): string[] => text.match(/[^\n]*\n|[^\n]+$/g) ?? [];

/** The fenced block (fences included) holding 0-based `line`, or null. */
export function fencedBlockAt(text: string, line: number): string | null {
  const lines = splitLines(text);
  let opening: { at: number; fence: string } | null = null;
  for (let i = 0; i < lines.length; i++) {
    const match = FENCE.exec(lines[i].replace(/\r?\n$/, ""));
    if (match === null) continue;
    const [, fence, info] = match;
    if (opening === null) {
      if (fence[0] === "`" && info.includes("`")) continue; // an inline code span
      opening = { at: i, fence };
    } else if (fence[0] === opening.fence[0] && fence.length >= opening.fence.length && info.trim() === "") {
      if (opening.at <= line && line <= i) return lines.slice(opening.at, i + 1).join("");
      if (line < opening.at) return null;
      opening = null;
    }
  }
  return null;
}

/** The snippet a command works on: the selection when there is one, else the fenced block under
 * the cursor, else `fallback` (the clipboard); null when all are blank. */
export function pickSnippet(selection: string, documentText: string, cursorLine: number, fallback = ""): string | null {
  for (const candidate of [selection, fencedBlockAt(documentText, cursorLine) ?? "", fallback]) {
    if (candidate.trim() !== "") return candidate;
  }
  return null;
}

/** The file a snippet names: a path in its fence's info string, or a first code line that is only
 * a comment naming a file (`# app.py`, `// File: src/app.ts`); else null. */
export function namedFile(snippet: string): string | null {
  const lines = splitLines(snippet.replace(/^\s*\n/, ""));
  const match = lines.length > 0 ? FENCE.exec(lines[0].replace(/\r?\n$/, "")) : null;
  if (match === null) return null;
  const words = match[2].split(/\s+/).filter((w) => w !== "");
  // The first word is the language tag unless it is itself a path (```app.py).
  for (const word of words.length > 0 && new RegExp(`^${PATH}$`).test(words[0]) ? words : words.slice(1)) {
    const hit = INFO_WORD.exec(word);
    if (hit) return hit[1];
  }
  const comment = lines.length > 1 ? COMMENT_PATH.exec(lines[1].replace(/\r?\n$/, "")) : null;
  return comment ? comment[1] : null;
}

/** The language tag of a snippet's opening fence (```ts), lowercased; null without one. */
export function fenceLanguage(snippet: string): string | null {
  const first = splitLines(snippet.replace(/^\s*\n/, ""))[0]?.replace(/\r?\n$/, "") ?? "";
  const tag = FENCE.exec(first)?.[2].trim().split(/\s+/)[0] ?? "";
  return tag === "" || new RegExp(`^${PATH}$`).test(tag) ? null : tag.toLowerCase();
}

// A fence tag's file extensions (the tags chat models write; the server's languages).
const EXTENSIONS: Record<string, string[]> = {
  python: ["py", "pyi"], py: ["py", "pyi"], typescript: ["ts", "tsx", "mts", "cts"], ts: ["ts", "tsx", "mts", "cts"],
  tsx: ["tsx"], javascript: ["js", "jsx", "mjs", "cjs"], js: ["js", "jsx", "mjs", "cjs"], jsx: ["jsx"],
  go: ["go"], golang: ["go"], rust: ["rs"], rs: ["rs"], java: ["java"], c: ["c", "h"], cpp: ["cpp", "cc", "cxx", "hpp", "hh", "h"],
  "c++": ["cpp", "cc", "cxx", "hpp", "hh", "h"], ruby: ["rb"], rb: ["rb"], csharp: ["cs"], cs: ["cs"], "c#": ["cs"],
  sh: ["sh", "bash"], bash: ["sh", "bash"], shell: ["sh", "bash"], lua: ["lua"],
};
// Files a code snippet is seldom for: settings, docs, data.
const NOT_CODE = new Set(["json", "jsonc", "md", "markdown", "txt", "rst", "yaml", "yml", "toml", "ini", "cfg", "lock", "log", "csv"]);

/** `paths` ordered for a pick list: those ending with the named file first (the longest common
 * tail of path segments wins), then files of the fence's `language`, then other code, then
 * settings, docs and data; each group in the given order. Paths use "/" separators. */
export function rankTargets(name: string | null, paths: string[], language: string | null = null): string[] {
  const wanted = (name ?? "").split("/").filter((s) => s !== "" && s !== ".");
  const named = (path: string): number => {
    const segments = path.split("/");
    let n = 0;
    while (n < wanted.length && segments[segments.length - 1 - n] === wanted[wanted.length - 1 - n]) n++;
    return n === 0 ? 0 : n === wanted.length ? 1000 + n : n;
  };
  const extensions = language === null ? [] : EXTENSIONS[language] ?? [language];
  const kind = (path: string): number => {
    const extension = /\.([^./]+)$/.exec(path)?.[1].toLowerCase() ?? "";
    return extensions.includes(extension) ? 2 : NOT_CODE.has(extension) ? 0 : 1;
  };
  return paths
    .map((path, i) => ({ path, i, named: named(path), kind: kind(path) }))
    .sort((a, b) => b.named - a.named || b.kind - a.kind || a.i - b.i)
    .map((x) => x.path);
}

/** One change of a review (editapply.preview, editapply.hunks): 0-based rows of the document
 * [start, end) and of the merged text [newStart, newEnd). */
export interface Hunk {
  start: number;
  end: number;
  newStart: number;
  newEnd: number;
}

/** The index of the change at 0-based `line` of one side of the diff (`old`: the document, `new`:
 * the merged text), or null. A change with no rows on that side (a deletion seen from the merged
 * text) is at the rows on either side of its gap. */
export function hunkAt(hunks: Hunk[], line: number, side: "old" | "new"): number | null {
  const range = (h: Hunk): [number, number] => (side === "old" ? [h.start, h.end] : [h.newStart, h.newEnd]);
  let k = hunks.findIndex((h) => range(h)[0] <= line && line < range(h)[1]);
  if (k < 0) k = hunks.findIndex((h) => range(h)[0] === range(h)[1] && (line === range(h)[0] || line === range(h)[0] - 1));
  return k < 0 ? null : k;
}

/** A finding of the server's validation (engine/apply/errors.py's Problem). */
export interface Problem {
  name: string;
  reason: string;
  severity: string; // "error" | "warning"
  line?: number | null;
}

export interface Validation {
  ok: boolean;
  problems?: Problem[];
}

/** One reading of an ambiguous snippet: the server's sentence for it, its unified diff against
 * the document, the whole merged text, and the model's log-probability when it ranked them. */
export interface Reading {
  label: string;
  diff: string;
  merged: string;
  logprob: number | null;
}

/** The reasons a failed validation gives: its errors, in the server's words. */
export function validationReasons(validation: Validation): string[] {
  return (validation.problems ?? []).filter((p) => p.severity === "error")
    .map((p) => (p.line ? `line ${p.line}: ${p.reason}` : p.reason));
}

/** The readings an apply or preview result leaves to the user: those of an ambiguous snippet that
 * nothing chose (validation failed, nothing applied). None when the model picked one itself. */
export function readingsToPick(result: { applied?: boolean; validation?: Validation; readings?: Reading[] }): Reading[] {
  return result.applied !== true && result.validation?.ok === false ? result.readings ?? [] : [];
}

/** The deterministic merge a result leaves for review: a model's file failed validation (nothing
 * applied) where the merge validated; undefined otherwise. */
export function candidateToReview(result: { applied?: boolean; validation?: Validation; candidate?: Reading | null }): Reading | undefined {
  return result.applied !== true && result.validation?.ok === false ? result.candidate ?? undefined : undefined;
}

/** Lines a unified diff adds and removes, counted in its hunks (not its ---/+++ header). */
export function diffLines(diff: string): { added: number; removed: number } {
  let added = 0;
  let removed = 0;
  let inHunk = false;
  for (const line of diff.split("\n")) {
    if (line.startsWith("@@")) inHunk = true;
    else if (inHunk && line.startsWith("+")) added++;
    else if (inHunk && line.startsWith("-")) removed++;
  }
  return { added, removed };
}

/** A pick-list entry per reading: "Reading N", what it changes (and the model's log-probability
 * when it has one), and the server's sentence saying what the reading means. */
export function readingItems(readings: Reading[]): { label: string; description: string; detail: string }[] {
  return readings.map((r, i) => {
    const { added, removed } = diffLines(r.diff);
    const change = added + removed === 0 ? "no change" : `+${added} −${removed} lines`;
    const logprob = r.logprob === null ? "" : ` · log p ${r.logprob.toFixed(2).replace("-", "−")}`;
    return { label: `Reading ${i + 1}`, description: change + logprob, detail: r.label };
  });
}

/** What an editapply.apply / applyMerged result says, for a status message. */
export function describeResult(result: { applied?: boolean; edits?: number; path?: string }, file: string): string {
  if (!result.applied) return `editapply: nothing applied to ${file}`;
  if (!result.edits) return `editapply: ${file} already matches the edit`;
  const how = { model: "the model", deterministic: "deterministic merge", ranked: "the reading the model chose" }[
    result.path ?? ""] ?? "";
  return `editapply: applied ${result.edits} edit${result.edits === 1 ? "" : "s"} to ${file}${how ? ` (${how})` : ""}`;
}

/** A failed command as the user should read it: the server's one-line message (which names the
 * reason), or that it was cancelled. `code` and `data.reason` are JSON-RPC's (lsp_server/errors.py). */
export function describeFailure(error: unknown): { cancelled: boolean; message: string } {
  const e = (error ?? {}) as { code?: number; message?: string; data?: { reason?: string } };
  if (e.code === -32800) return { cancelled: true, message: "editapply: cancelled" };
  const message = (e.message ?? String(error)).replace(/^editapply:\s*/, "");
  return { cancelled: false, message: `editapply: ${message}` };
}
