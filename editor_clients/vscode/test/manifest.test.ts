import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, it } from "node:test";
import { serverSettings } from "../src/settings";

// package.json, read from the extension's folder (this file runs from out/test/).
const manifest = JSON.parse(readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8"));
const contributed: string[] = manifest.contributes.commands.map((c: { command: string }) => c.command);
// The server's workspace/executeCommand names (lsp_server): vscode-languageclient registers each one
// as a VS Code command, so a client command with the same id would stop the client from starting.
const SERVER_COMMANDS = ["editapply.apply", "editapply.preview", "editapply.applyMerged", "editapply.ask", "editapply.status"];

describe("package.json", () => {
  it("names no command the way the server names one", () => {
    assert.deepEqual(contributed.filter((c) => SERVER_COMMANDS.includes(c)), []);
  });

  it("gives every command the editapply category, so the palette reads 'editapply: ...'", () => {
    for (const c of manifest.contributes.commands) assert.equal(c.category, "editapply", c.command);
  });

  it("points every menu entry and keybinding at a contributed command", () => {
    const used = [...Object.values(manifest.contributes.menus).flat(), ...manifest.contributes.keybindings]
      .map((entry) => (entry as { command: string }).command);
    assert.deepEqual(used.filter((c) => !contributed.includes(c)), []);
  });

  it("sends every setting but server.* and trace.*, and has one for every key sent but apiKey and pickReadings", () => {
    const settings = Object.keys(manifest.contributes.configuration.properties)
      .map((k) => k.replace(/^editapply\./, "")).filter((k) => !/^(server|trace)\./.test(k));
    const sent = Object.keys(serverSettings(() => undefined, undefined)).filter((k) => !["apiKey", "pickReadings"].includes(k));
    assert.deepEqual(settings.sort(), sent.sort());
  });

  it("has no setting for the API key: it lives in SecretStorage", () => {
    assert.equal(Object.keys(manifest.contributes.configuration.properties).some((k) => /apikey/i.test(k)), false);
  });

  it("shows Accept and Reject in the preview diff editor's title", () => {
    const title = manifest.contributes.menus["editor/title"];
    for (const command of ["editapply.acceptPreview", "editapply.rejectPreview"]) {
      const entry = title.find((e: { command: string }) => e.command === command);
      assert.match(entry.when, /resourceScheme == editapply-preview/);
    }
  });
});
