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

/** `paths` ordered for a pick list: those ending with the named file first (the longest common
 * tail of path segments wins), then the others in their order. Paths use "/" separators. */
export function rankTargets(name: string | null, paths: string[]): string[] {
  if (name === null) return [...paths];
  const wanted = name.split("/").filter((s) => s !== "" && s !== ".");
  const score = (path: string): number => {
    const segments = path.split("/");
    let n = 0;
    while (n < wanted.length && segments[segments.length - 1 - n] === wanted[wanted.length - 1 - n]) n++;
    return n === 0 ? 0 : n === wanted.length ? 1000 + n : n;
  };
  return paths
    .map((path, i) => ({ path, i, s: score(path) }))
    .sort((a, b) => b.s - a.s || a.i - b.i)
    .map((x) => x.path);
}

/** What an editapply.apply / applyMerged result says, for a status message. */
export function describeResult(result: { applied?: boolean; edits?: number; path?: string }, file: string): string {
  if (!result.applied) return `editapply: nothing applied to ${file}`;
  if (!result.edits) return `editapply: ${file} already matches the edit`;
  const how = result.path === "model" ? "the model" : result.path === "deterministic" ? "deterministic merge" : "";
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
