import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { findProgram, serverLaunch, serverSettings } from "../src/settings";

const reader = (values: Record<string, unknown>) => (key: string) => values[key];

describe("serverSettings", () => {
  it("sends every key, null for what is unset, so the server restores its defaults", () => {
    assert.deepEqual(serverSettings(reader({}), undefined), {
      engineUrl: null, apiKey: null, model: null, backend: null, vllmUrl: null, mode: null, promptForm: null,
      maxTokens: null, pickReadings: true,
    });
  });

  it("maps the editapply.* settings and the secret to the server's camelCase keys", () => {
    const got = serverSettings(reader({
      engineUrl: "http://127.0.0.1:8000/", model: " qwen2.5-coder-0.5b ", backend: "vllm",
      vllmUrl: "http://gpu:8001/", mode: "deterministic", promptForm: "rewrite", maxTokens: 256,
    }), "sk-1");
    assert.deepEqual(got, {
      engineUrl: "http://127.0.0.1:8000", apiKey: "sk-1", model: "qwen2.5-coder-0.5b", backend: "vllm",
      vllmUrl: "http://gpu:8001", mode: "deterministic", promptForm: "rewrite", maxTokens: 256, pickReadings: true,
    });
  });

  it("treats blank strings and bad numbers as unset", () => {
    const got = serverSettings(reader({ engineUrl: "  ", model: "", vllmUrl: "", maxTokens: 0 }), "   ");
    assert.equal(got.engineUrl, null);
    assert.equal(got.vllmUrl, null);
    assert.equal(got.model, null);
    assert.equal(got.maxTokens, null);
    assert.equal(got.apiKey, null);
    assert.equal(serverSettings(reader({ maxTokens: 2.5 }), undefined).maxTokens, null);
  });

  it("never sends the server.* settings (the server would warn about unknown keys)", () => {
    const got = serverSettings(reader({ "server.command": ["x"], "server.tcp": "h:1" }), undefined);
    assert.deepEqual(Object.keys(got).sort(),
                     ["apiKey", "backend", "engineUrl", "maxTokens", "mode", "model", "pickReadings", "promptForm",
                      "vllmUrl"]);
  });

  it("always asks for an ambiguous snippet's readings: the extension offers them itself", () => {
    assert.equal(serverSettings(reader({ pickReadings: false }), undefined).pickReadings, true);
  });
});

describe("serverLaunch", () => {
  it("runs `editapply lsp` by default", () => {
    assert.deepEqual(serverLaunch(reader({})), { kind: "stdio", command: "editapply", args: ["lsp"] });
    assert.deepEqual(serverLaunch(reader({ "server.command": [] })), { kind: "stdio", command: "editapply", args: ["lsp"] });
  });

  it("takes a custom command", () => {
    assert.deepEqual(serverLaunch(reader({ "server.command": ["/v/bin/editapply", "lsp", "--log-level", "info"] })),
                     { kind: "stdio", command: "/v/bin/editapply", args: ["lsp", "--log-level", "info"] });
  });

  it("runs the package with a Python interpreter", () => {
    assert.deepEqual(serverLaunch(reader({ "server.pythonPath": "/v/bin/python", "server.command": ["x"] })),
                     { kind: "stdio", command: "/v/bin/python", args: ["-m", "engine.cli", "lsp"] });
  });

  it("connects over TCP when server.tcp is set", () => {
    assert.deepEqual(serverLaunch(reader({ "server.tcp": "127.0.0.1:2087" })), { kind: "tcp", host: "127.0.0.1", port: 2087 });
    assert.deepEqual(serverLaunch(reader({ "server.tcp": "[::1]:2087" })), { kind: "tcp", host: "::1", port: 2087 });
  });

  it("refuses a malformed server.tcp", () => {
    assert.throws(() => serverLaunch(reader({ "server.tcp": "localhost" })), /HOST:PORT/);
    assert.throws(() => serverLaunch(reader({ "server.tcp": "localhost:70000" })), /HOST:PORT/);
  });
});

describe("findProgram", () => {
  const executables = new Set(["/venv/bin/editapply", "/usr/bin/python3"]);
  const isExecutable = (file: string): boolean => executables.has(file);
  it("looks a bare name up on PATH, in order", () => {
    assert.equal(findProgram("editapply", "/usr/bin:/venv/bin/", isExecutable), "/venv/bin/editapply");
    assert.equal(findProgram("python3", "/usr/bin:/venv/bin", isExecutable), "/usr/bin/python3");
  });
  it("takes a path as it is, and says null for what is not there (issue 32, item 8)", () => {
    assert.equal(findProgram("/venv/bin/editapply", "", isExecutable), "/venv/bin/editapply");
    assert.equal(findProgram("/nowhere/editapply", "/venv/bin", isExecutable), null);
    assert.equal(findProgram("editapply", "/usr/bin", isExecutable), null);
  });
});
