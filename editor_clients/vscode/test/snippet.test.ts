import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import {
  candidateToReview, describeFailure, describeResult, diffLines, fenceLanguage, fencedBlockAt, hunkAt, namedFile, pickSnippet, rankTargets, readingItems, readingsToPick,
  validationReasons,
} from "../src/snippet";

const chat = [
  "Change the handler:",           // 0
  "```python src/app.py",          // 1
  "def handler():",                // 2
  "    # ... existing code ...",   // 3
  "    return 2",                  // 4
  "```",                           // 5
  "and run `pytest`.",             // 6
  "~~~",                           // 7
  "x = 1",                         // 8
  "~~~",                           // 9
].join("\n") + "\n";

describe("fencedBlockAt", () => {
  it("finds the block around a line, fences included", () => {
    const block = fencedBlockAt(chat, 3);
    assert.equal(block, "```python src/app.py\ndef handler():\n    # ... existing code ...\n    return 2\n```\n");
    assert.equal(fencedBlockAt(chat, 1), block);
    assert.equal(fencedBlockAt(chat, 5), block);
    assert.equal(fencedBlockAt(chat, 8), "~~~\nx = 1\n~~~\n");
  });

  it("gives null outside any block", () => {
    assert.equal(fencedBlockAt(chat, 0), null);
    assert.equal(fencedBlockAt(chat, 6), null);
    assert.equal(fencedBlockAt("no fences\n", 0), null);
  });

  it("closes a fence only with the same character, at least as long, and no info", () => {
    const text = "````\n```\ninner\n```\n````\n";
    assert.equal(fencedBlockAt(text, 2), text);
  });

  it("does not take an inline code span for a fence", () => {
    assert.equal(fencedBlockAt("```inline``` text\nplain\n", 1), null);
  });
});

describe("pickSnippet", () => {
  it("prefers the selection, then the block under the cursor, then the fallback", () => {
    assert.equal(pickSnippet("x = 2", chat, 3, "clip"), "x = 2");
    assert.equal(pickSnippet("", chat, 8, "clip"), "~~~\nx = 1\n~~~\n");
    assert.equal(pickSnippet("", chat, 0, "clip"), "clip");
    assert.equal(pickSnippet("  \n", chat, 0, " "), null);
  });
});

describe("namedFile", () => {
  it("reads a path from the fence's info string", () => {
    assert.equal(namedFile("```python src/app.py\nx\n```"), "src/app.py");
    assert.equal(namedFile('```py title="app.py"\nx\n```'), "app.py");
    assert.equal(namedFile("```lib/option.js\nx\n```"), "lib/option.js");
  });

  it("reads a first-line comment naming a file", () => {
    assert.equal(namedFile("```go\n// File: peers.go\npackage x\n```"), "peers.go");
    assert.equal(namedFile("```\n# flask/config.py\nx = 1\n```"), "flask/config.py");
  });

  it("gives null when nothing is named", () => {
    assert.equal(namedFile("```python\nx = 1\n```"), null);
    assert.equal(namedFile("x = 1\n"), null);
    assert.equal(namedFile("```python\n# just a comment\n```"), null);
  });
});

describe("rankTargets", () => {
  const open = ["/w/tests/app.py", "/w/src/app.py", "/w/README.md"];
  it("puts the files ending with the named path first", () => {
    assert.deepEqual(rankTargets("src/app.py", open), ["/w/src/app.py", "/w/tests/app.py", "/w/README.md"]);
    assert.deepEqual(rankTargets("app.py", open), ["/w/tests/app.py", "/w/src/app.py", "/w/README.md"]);
  });

  it("keeps the order when nothing is named or nothing matches", () => {
    assert.deepEqual(rankTargets(null, open), open);
    assert.deepEqual(rankTargets("main.go", open), open);
  });

  it("puts files of the fence's language next, settings and docs last (issue 32, item 6)", () => {
    const files = ["/u/.config/Code/User/settings.json", "/w/README.md", "/w/app.py", "/w/src/cart.ts"];
    assert.deepEqual(rankTargets(null, files, fenceLanguage("```ts\nexport const x = 1;\n```\n")),
                     ["/w/src/cart.ts", "/w/app.py", "/u/.config/Code/User/settings.json", "/w/README.md"]);
    assert.deepEqual(rankTargets(null, files), ["/w/app.py", "/w/src/cart.ts", "/u/.config/Code/User/settings.json",
                                                "/w/README.md"]);
    assert.deepEqual(rankTargets("README.md", files, "ts")[0], "/w/README.md");
  });
});

describe("fenceLanguage", () => {
  it("reads the opening fence's tag, not a path", () => {
    assert.equal(fenceLanguage("```TypeScript title=\"a.ts\"\nx\n```"), "typescript");
    assert.equal(fenceLanguage("\n~~~py\nx\n~~~"), "py");
    assert.equal(fenceLanguage("```app.py\nx\n```"), null);
    assert.equal(fenceLanguage("x = 1\n"), null);
  });
});

describe("describeResult / describeFailure", () => {
  it("says how many edits went where, and by which path", () => {
    assert.equal(describeResult({ applied: true, edits: 3, path: "deterministic" }, "src/app.py"),
                 "editapply: applied 3 edits to src/app.py (deterministic merge)");
    assert.equal(describeResult({ applied: true, edits: 1, path: "model" }, "a.go"), "editapply: applied 1 edit to a.go (the model)");
    assert.equal(describeResult({ applied: true, edits: 0 }, "a.go"), "editapply: a.go already matches the edit");
    assert.equal(describeResult({ applied: true, edits: 1, path: "ranked" }, "a.py"),
                 "editapply: applied 1 edit to a.py (the reading the model chose)");
    assert.equal(describeResult({ applied: false }, "a.go"), "editapply: nothing applied to a.go");
  });

  it("shows the server's message and tells a cancel apart", () => {
    assert.deepEqual(describeFailure({ code: -32800, message: "editapply.apply was cancelled" }),
                     { cancelled: true, message: "editapply: cancelled" });
    assert.deepEqual(describeFailure({ code: -32803, message: "app.py changed since the preview", data: { reason: "stale_version" } }),
                     { cancelled: false, message: "editapply: app.py changed since the preview" });
    assert.equal(describeFailure(new Error("editapply: boom")).message, "editapply: boom");
  });
});

// The server's two readings of a snippet that ends at a class's docstring (tests/lsp/test_apply.py).
const KEEP = { label: "the snippet's last line with no marker after it: original lines 3-7 below are kept",
               diff: "", merged: "class MyError(Exception):\n    pass\n", logprob: null };
const END = { label: "the snippet's last line ends its block: original lines 3-3 are deleted",
              diff: "--- a/a.py\n+++ b/a.py\n@@ -1,3 +1,2 @@\n class MyError(Exception):\n-    pass\n \n",
              merged: "class MyError(Exception):\n", logprob: null };

describe("readings", () => {
  it("are offered only when nothing chose one: validation failed and nothing was applied", () => {
    const refused = { validation: { ok: false }, readings: [KEEP, END] };
    assert.deepEqual(readingsToPick({ ...refused, applied: false }), [KEEP, END]);
    assert.deepEqual(readingsToPick(refused), [KEEP, END]); // a preview: no `applied`
    // The model ranked them and its pick was applied (the readings list the one taken first).
    assert.deepEqual(readingsToPick({ applied: true, validation: { ok: true }, readings: [END, KEEP] }), []);
    assert.deepEqual(readingsToPick({ validation: { ok: true }, readings: [END, KEEP] }), []);
    assert.deepEqual(readingsToPick({ applied: false, validation: { ok: false } }), []);
  });

  it("leave a refused model file's merge for review only when nothing was applied", () => {
    const refused = { validation: { ok: false }, candidate: END };
    assert.equal(candidateToReview({ ...refused, applied: false }), END);
    assert.equal(candidateToReview(refused), END); // a preview
    assert.equal(candidateToReview({ ...refused, applied: true }), undefined); // "Apply anyway" was taken
    assert.equal(candidateToReview({ validation: { ok: false }, candidate: null }), undefined);
    assert.equal(candidateToReview({ validation: { ok: true }, candidate: END }), undefined);
  });

  it("count a diff's lines in its hunks, not its header", () => {
    assert.deepEqual(diffLines(END.diff), { added: 0, removed: 1 });
    assert.deepEqual(diffLines("--- a/x.lua\n+++ b/x.lua\n@@ -1 +1,2 @@\n---- old comment\n+-- new\n+++x\n"),
                     { added: 2, removed: 1 });
    assert.deepEqual(diffLines(""), { added: 0, removed: 0 });
  });

  it("read as 'Reading N', what each changes, and the server's sentence", () => {
    assert.deepEqual(readingItems([KEEP, END]), [
      { label: "Reading 1", description: "no change", detail: KEEP.label },
      { label: "Reading 2", description: "+0 −1 lines", detail: END.label },
    ]);
    assert.equal(readingItems([{ ...END, logprob: -3.21 }])[0].description, "+0 −1 lines · log p −3.21");
  });
});

describe("validationReasons", () => {
  it("gives the errors' reasons (the server's `reason`), with their line when known", () => {
    const validation = { ok: false, problems: [
      { name: "syntax_error", reason: "'(' was never closed", severity: "error", line: 7 },
      { name: "implied_marker", reason: "the code below is kept", severity: "warning", line: null },
      { name: "no_change", reason: "the result is identical to the original", severity: "error" },
    ] };
    assert.deepEqual(validationReasons(validation),
                     ["line 7: '(' was never closed", "the result is identical to the original"]);
    assert.deepEqual(validationReasons({ ok: true }), []);
  });
});

describe("hunkAt", () => {
  // Row 2 replaced, two rows inserted before row 10, rows 17-18 deleted (engine/apply/hunks.py's test).
  const hunks = [{ start: 2, end: 3, newStart: 2, newEnd: 3 }, { start: 10, end: 10, newStart: 10, newEnd: 12 },
                 { start: 17, end: 19, newStart: 19, newEnd: 19 }];
  it("finds the change holding the line, on either side", () => {
    assert.equal(hunkAt(hunks, 2, "old"), 0);
    assert.equal(hunkAt(hunks, 11, "new"), 1);
    assert.equal(hunkAt(hunks, 18, "old"), 2);
    assert.equal(hunkAt(hunks, 5, "new"), null);
  });
  it("takes a change with no rows on a side at the rows beside its gap", () => {
    assert.equal(hunkAt(hunks, 9, "old"), 1);
    assert.equal(hunkAt(hunks, 10, "old"), 1);
    assert.equal(hunkAt(hunks, 18, "new"), 2);
    assert.equal(hunkAt(hunks, 19, "new"), 2);
  });
});
