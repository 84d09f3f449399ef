// The user's commands, each one `workspace/executeCommand` on the server (README, "Use it from an
// editor"): the server merges against the document as the editor holds it and sends the edit back
// as `workspace/applyEdit`, which the language client applies; a result that fails validation is
// offered by the server itself ("Apply anyway" / "Cancel").
import * as path from "node:path";
import { env, Uri, ViewColumn, window, workspace } from "vscode";
import type { TextEditor } from "vscode";
import { ExecuteCommandRequest } from "vscode-languageclient/node";
import type { LanguageClient } from "vscode-languageclient/node";
import { Previews } from "./preview";
import { describeFailure, describeResult, namedFile, pickSnippet, rankTargets } from "./snippet";

type Client = () => LanguageClient;

interface PreviewResult {
  uri: string;
  version: number | null;
  merged: string;
  validation: { ok: boolean; problems?: { severity: string; message?: string }[] };
}

/** Run a server command; a failure is shown (a cancel quietly) and gives undefined. */
async function run<T>(client: Client, command: string, args: object): Promise<T | undefined> {
  try {
    return (await client().sendRequest(ExecuteCommandRequest.type, { command, arguments: [args] })) as T;
  } catch (error) {
    const failure = describeFailure(error);
    if (failure.cancelled) window.setStatusBarMessage(failure.message, 5000);
    else void window.showErrorMessage(failure.message);
    return undefined;
  }
}

function activeEditor(): TextEditor | undefined {
  const editor = window.activeTextEditor;
  if (editor === undefined) void window.showWarningMessage("editapply: open the file to edit first");
  return editor;
}

const label = (uri: Uri): string => workspace.asRelativePath(uri, false);

async function apply(client: Client, target: Uri, snippet: string): Promise<void> {
  const result = await run<{ applied: boolean; edits?: number; path?: string }>(
    client, "editapply.apply", { uri: target.toString(), snippet });
  if (result !== undefined) window.setStatusBarMessage(describeResult(result, label(target)), 8000);
}

export async function applyClipboard(client: Client): Promise<void> {
  const editor = activeEditor();
  if (editor === undefined) return;
  const snippet = await env.clipboard.readText();
  if (snippet.trim() === "") {
    void window.showWarningMessage("editapply: the clipboard is empty: copy the edit snippet first");
    return;
  }
  await apply(client, editor.document.uri, snippet);
}

/** The selection (or the fenced block under the cursor) of this editor, applied to another file:
 * the one the snippet names comes first in the pick list. */
export async function applySelectionToFile(client: Client): Promise<void> {
  const editor = activeEditor();
  if (editor === undefined) return;
  const { document, selection } = editor;
  const snippet = pickSnippet(document.getText(selection), document.getText(), selection.active.line);
  if (snippet === null) {
    void window.showWarningMessage("editapply: select the edit snippet (or put the cursor in a fenced block)");
    return;
  }
  const open = workspace.textDocuments.filter((d) => d.uri.toString() !== document.uri.toString() && ["file", "untitled"].includes(d.uri.scheme));
  const byPath = new Map(open.map((d) => [d.uri.path, d.uri]));
  const ranked = rankTargets(namedFile(snippet), [...byPath.keys()]);
  const browse = "$(folder-opened) Other file…";
  const picked = await window.showQuickPick(
    [...ranked.map((p) => ({ label: path.basename(p), description: label(byPath.get(p)!), uri: byPath.get(p) })),
     { label: browse, description: "", uri: undefined }],
    { title: "editapply: apply the snippet to which file?" });
  if (picked === undefined) return;
  const target = picked.uri ?? (await window.showOpenDialog({ canSelectMany: false, openLabel: "Apply to" }))?.[0];
  if (target === undefined) return;
  await window.showTextDocument(await workspace.openTextDocument(target), { preview: false });
  await apply(client, target, snippet);
}

/** The clipboard's snippet merged into this file and shown as a diff; nothing changes before Accept. */
export async function preview(client: Client, previews: Previews): Promise<void> {
  const editor = activeEditor();
  if (editor === undefined) return;
  const document = editor.document;
  const snippet = await env.clipboard.readText();
  if (snippet.trim() === "") {
    void window.showWarningMessage("editapply: the clipboard is empty: copy the edit snippet first");
    return;
  }
  const result = await run<PreviewResult>(client, "editapply.preview", { uri: document.uri.toString(), snippet });
  if (result === undefined) return;
  if (result.version === null) {
    void window.showErrorMessage("editapply: the document is not open in the server; try again");
    return;
  }
  const failed = !result.validation.ok;
  if (failed) {
    const reasons = (result.validation.problems ?? []).filter((p) => p.severity === "error").map((p) => p.message);
    void window.showWarningMessage(`editapply: the merged text failed validation: ${reasons.join("; ")}`);
  }
  await previews.show({ target: document.uri, version: result.version, merged: result.merged },
                      failed ? "validation failed" : undefined);
}

export async function acceptPreview(client: Client, previews: Previews, uri?: Uri): Promise<void> {
  const shown = previews.active(uri);
  if (shown === undefined) return;
  const { target, version, merged } = shown.preview;
  const result = await run<{ applied: boolean; edits: number }>(
    client, "editapply.applyMerged", { uri: target.toString(), version, merged });
  if (result === undefined) return; // e.g. stale: the preview stays open, the error says why
  await previews.close(shown.uri);
  await window.showTextDocument(target, { preview: false });
  window.setStatusBarMessage(describeResult(result, label(target)), 8000);
}

export async function rejectPreview(previews: Previews, uri?: Uri): Promise<void> {
  const shown = previews.active(uri);
  if (shown !== undefined) await previews.close(shown.uri);
}

export async function ask(client: Client): Promise<void> {
  const editor = activeEditor();
  if (editor === undefined) return;
  const question = await window.showInputBox({ title: `editapply: ask about ${label(editor.document.uri)}`,
                                               prompt: "The answer is drafted from the file itself" });
  if (!question?.trim()) return;
  const result = await run<{ answer: string }>(client, "editapply.ask", { question, uri: editor.document.uri.toString() });
  if (result === undefined) return;
  const content = `**${question.trim()}**\n\n${result.answer}\n`;
  await window.showTextDocument(await workspace.openTextDocument({ language: "markdown", content }),
                                { viewColumn: ViewColumn.Beside, preview: true });
}

export async function showStatus(client: Client): Promise<void> {
  const status = await run<object>(client, "editapply.status", {});
  if (status !== undefined) {
    await window.showTextDocument(await workspace.openTextDocument({ language: "json", content: JSON.stringify(status, null, 2) }),
                                  { viewColumn: ViewColumn.Beside, preview: true });
  }
}
