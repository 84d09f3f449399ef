// The language client for `editapply lsp`: how it is started (settings.ts's serverLaunch), what it
// is sent (serverSettings, with the API key from SecretStorage), which documents it sees, and who
// hears the results of the server's own code action.
import * as net from "node:net";
import { workspace } from "vscode";
import type { ExtensionContext, OutputChannel } from "vscode";
import { DidChangeConfigurationNotification, LanguageClient } from "vscode-languageclient/node";
import type { ServerOptions, StreamInfo } from "vscode-languageclient/node";
import type { ApplyResult } from "./commands";
import { showProgress } from "./progress";
import { serverLaunch, serverSettings } from "./settings";
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
  const cwd = workspace.workspaceFolders?.[0]?.uri.fsPath;
  return { command: launch.command, args: launch.args, options: { cwd } };
}

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
  await client.start();
  context.subscriptions.push(showProgress(client));
  return client;
}

export async function sendSettings(client: LanguageClient, context: ExtensionContext): Promise<void> {
  await client.sendNotification(DidChangeConfigurationNotification.type, { settings: await currentSettings(context) });
}
