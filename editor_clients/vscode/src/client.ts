// The language client for `editapply lsp`: how it is started (settings.ts's serverLaunch), what it
// is sent (serverSettings, with the API key from SecretStorage), which documents it sees, and who
// hears the results of the server's own code action.
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { window, workspace } from "vscode";
import type { ExtensionContext, OutputChannel } from "vscode";
import { DidChangeConfigurationNotification, LanguageClient, ShowMessageRequest } from "vscode-languageclient/node";
import type { ServerOptions, StreamInfo } from "vscode-languageclient/node";
import type { ApplyResult } from "./commands";
import { showProgress } from "./progress";
import { findProgram, serverLaunch, serverSettings } from "./settings";
import type { ServerSettings } from "./settings";

export const API_KEY = "editapply.apiKey"; // the SecretStorage key

export async function currentSettings(context: ExtensionContext): Promise<ServerSettings> {
  const config = workspace.getConfiguration("editapply");
  return serverSettings((key) => config.get(key), await context.secrets.get(API_KEY));
}

function serverOptions(): ServerOptions {
  const config = workspace.getConfiguration("editapply");
  const launch = serverLaunch((key) => config.get(key));
  if (launch.kind === "tcp") {
    return () => new Promise<StreamInfo>((resolve, reject) => {
      const socket = net.connect(launch.port, launch.host, () => resolve({ reader: socket, writer: socket }));
      socket.once("error", reject);
    });
  }
  const executable = (file: string): boolean => {
    try {
      fs.accessSync(file, fs.constants.X_OK);
      return fs.statSync(file).isFile();
    } catch {
      return false;
    }
  };
  if (findProgram(launch.command, process.env.PATH ?? "", executable, path.delimiter) === null) {
    // Said before the client starts: its own "Couldn't start client" would come beside ours.
    throw new Error(`\`${launch.command}\` is not an executable (not on PATH)`);
  }
  const cwd = workspace.workspaceFolders?.[0]?.uri.fsPath;
  return { command: launch.command, args: launch.args, options: { cwd } };
}

/** The language client could not start the server; it has told the user itself. */
export class StartFailed extends Error {}

/** `onApplied` gets the result of an `editapply.apply` run through VS Code's command of that name:
 * the server's code action ("Apply this snippet to FILE") does, and its result would be lost. */
export async function startClient(context: ExtensionContext, output: OutputChannel,
                                  onApplied: (result: ApplyResult) => Promise<void>): Promise<LanguageClient> {
  const client = new LanguageClient("editapply", "editapply", serverOptions(), {
    // Every text document: an edit can be for any language, and chat panes carry snippets.
    documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
    initializationOptions: await currentSettings(context),
    outputChannel: output,
    middleware: {
      executeCommand: async (command, args, next) => {
        const result = await next(command, args);
        if (command === "editapply.apply" && result) await onApplied(result as ApplyResult);
        return result;
      },
    },
  });
  // The server's questions (a result that failed validation: "Apply anyway" / "Cancel") as modal
  // dialogs: a notification timed out into the notification list while the apply waited for it.
  client.onRequest(ShowMessageRequest.type, async ({ message, actions }) => {
    const titles = (actions ?? []).map((a) => a.title).filter((t) => t !== "Cancel"); // the modal has its own
    const answer = await window.showWarningMessage(message, { modal: true }, ...titles);
    return answer === undefined ? null : { title: answer };
  });
  try {
    await client.start();
  } catch (error) {
    throw new StartFailed(error instanceof Error ? error.message : String(error));
  }
  context.subscriptions.push(showProgress(client));
  return client;
}

export async function sendSettings(client: LanguageClient, context: ExtensionContext): Promise<void> {
  await client.sendNotification(DidChangeConfigurationNotification.type, { settings: await currentSettings(context) });
}
