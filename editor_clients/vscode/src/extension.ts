// editapply for VS Code: a thin client of `editapply lsp`. The server does the work (merge,
// validation, minimal edits, progress); this file starts it, keeps its settings current and
// registers the commands (commands.ts).
import { commands, window, workspace } from "vscode";
import type { ExtensionContext, Uri } from "vscode";
import type { LanguageClient } from "vscode-languageclient/node";
import { API_KEY, sendSettings, startClient, StartFailed } from "./client";
import * as editapply from "./commands";
import { Pages } from "./pages";
import { Previews } from "./preview";

let client: LanguageClient | undefined;

export async function activate(context: ExtensionContext): Promise<void> {
  const output = window.createOutputChannel("editapply");
  const previews = new Previews();
  const pages = new Pages();
  context.subscriptions.push(output, previews, pages);
  const current = (): LanguageClient => {
    if (client === undefined) throw new Error("the editapply server is not running: run 'editapply: Restart Server'");
    return client;
  };

  const restart = async (): Promise<void> => {
    const old = client;
    client = undefined;
    await old?.stop().catch(() => undefined);
    try {
      client = await startClient(context, output, (result) => editapply.applied(current, previews, result));
    } catch (error) {
      output.appendLine(`failed to start the server: ${String(error)}`);
      if (!(error instanceof StartFailed)) { // the language client has said that one itself
        void window.showErrorMessage(`editapply: the language server did not start (${error instanceof Error ?
          error.message : String(error)}); check editapply.server.command or editapply.server.pythonPath ` +
          "(in Remote settings in a remote window), then run 'editapply: Restart Server'");
      }
    }
  };

  const register = (id: string, fn: (...args: unknown[]) => Promise<void>): void => {
    context.subscriptions.push(commands.registerCommand(id, fn));
  };
  register("editapply.applyClipboard", () => editapply.applyClipboard(current, previews));
  register("editapply.applySelectionToFile", () => editapply.applySelectionToFile(current, previews));
  register("editapply.previewApply", () => editapply.preview(current, previews));
  register("editapply.acceptPreview", (uri) => editapply.acceptPreview(current, previews, uri as Uri | undefined));
  register("editapply.rejectPreview", (uri) => editapply.rejectPreview(previews, uri as Uri | undefined));
  register("editapply.acceptChange", () => editapply.reviewChange(current, previews, true));
  register("editapply.rejectChange", () => editapply.reviewChange(current, previews, false));
  register("editapply.askAboutFile", () => editapply.ask(current, pages));
  register("editapply.showStatus", () => editapply.showStatus(current, pages));
  register("editapply.restartServer", restart);
  register("editapply.setApiKey", async () => {
    const key = await window.showInputBox({ title: "editapply: API key for editapply.engineUrl", password: true,
                                            prompt: "Kept in VS Code's secret storage, never in settings.json" });
    if (key) await context.secrets.store(API_KEY, key.trim());
  });
  register("editapply.clearApiKey", () => Promise.resolve(context.secrets.delete(API_KEY)));

  context.subscriptions.push(
    workspace.onDidChangeConfiguration(async (event) => {
      if (event.affectsConfiguration("editapply.server")) await restart();
      else if (event.affectsConfiguration("editapply") && client) await sendSettings(client, context);
    }),
    context.secrets.onDidChange(async (event) => {
      if (event.key === API_KEY && client) await sendSettings(client, context);
    }),
  );
  await restart();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
