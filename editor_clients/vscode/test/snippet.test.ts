import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { describeFailure, describeResult, fencedBlockAt, namedFile, pickSnippet, rankTargets } from "../src/snippet";

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
});

describe("describeResult / describeFailure", () => {
  it("says how many edits went where, and by which path", () => {
    assert.equal(describeResult({ applied: true, edits: 3, path: "deterministic" }, "src/app.py"),
                 "editapply: applied 3 edits to src/app.py (deterministic merge)");
    assert.equal(describeResult({ applied: true, edits: 1, path: "model" }, "a.go"), "editapply: applied 1 edit to a.go (the model)");
    assert.equal(describeResult({ applied: true, edits: 0 }, "a.go"), "editapply: a.go already matches the edit");
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
