// The user's commands, each one `workspace/executeCommand` on the server (README, "Use it from an
// editor"): the server merges against the document as the editor holds it and sends the edit back
// as `workspace/applyEdit`, which the language client applies; a result that fails validation is
// offered by the server itself ("Apply anyway" / "Cancel"). A snippet the server can read several
// ways comes back unapplied with its readings (we told it `pickReadings`): they are offered here in
// a pick list, and the chosen one is applied with `editapply.applyMerged`. So does a model's file
// that failed validation where the deterministic merge validated (its `candidate`): either text is
// offered as a preview, the merge marked as not confirmed by the model; neither is applied unseen.
import * as path from "node:path";
import { env, ThemeIcon, Uri, window, workspace } from "vscode";
import type { QuickPickItem, TextEditor } from "vscode";
import { ExecuteCommandRequest } from "vscode-languageclient/node";
import type { LanguageClient } from "vscode-languageclient/node";
import type { Pages } from "./pages";
import { Previews, SCHEME } from "./preview";
import type { Preview } from "./preview";
import {
  candidateToReview, describeFailure, describeResult, fenceLanguage, hunkAt, namedFile, pickSnippet, rankTargets,
  readingItems, readingsToPick, validationReasons,
} from "./snippet";
import type { Hunk, Reading, Validation } from "./snippet";

type Client = () => LanguageClient;

/** What editapply.apply and editapply.preview both return (README, "Use it from an editor"). */
interface Result {
  uri: string;
  version: number | null;
  merged: string;
  validation: Validation;
  readings?: Reading[];
  candidate?: Reading | null;
}

export interface ApplyResult extends Result {
  applied: boolean;
  edits?: number;
  path?: string;
}

type PreviewResult = Result;

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

async function apply(client: Client, previews: Previews, target: Uri, snippet: string): Promise<void> {
  const result = await run<ApplyResult>(client, "editapply.apply", { uri: target.toString(), snippet });
  if (result !== undefined) await applied(client, previews, result);
}

/** After `editapply.apply` (our commands, or the server's code action): an ambiguous snippet's
 * readings to pick from, else what was done. Picking a reading applies it; its diff button shows
 * it as a preview first (Accept / Reject); Escape changes nothing. */
export async function applied(client: Client, previews: Previews, result: ApplyResult): Promise<void> {
  const target = Uri.parse(result.uri);
  const readings = readingsToPick(result);
  const candidate = candidateToReview(result);
  if (readings.length === 0 && candidate === undefined) {
    window.setStatusBarMessage(describeResult(result, label(target)), 8000);
    return;
  }
  if (result.version === null) { // a file the server read from disk: applyMerged needs it open
    const what = candidate ? "the model's edit failed validation" : `the snippet can be read ${readings.length} ways`;
    void window.showWarningMessage(`editapply: ${what}; open ${label(target)} and apply it again to choose`);
    return;
  }
  if (candidate !== undefined) {
    await reviewCandidate(previews, { ...result, version: result.version }, candidate);
    return;
  }
  const picked = await pickReading(readings, label(target), true);
  if (picked === undefined) return;
  const reading = { target, version: result.version, merged: readings[picked.index].merged };
  if (picked.diff) await previews.show(reading, `reading ${picked.index + 1}`);
  else await applyMerged(client, reading);
}

const REVIEW_MERGE = "Review the Merge";
const REVIEW_MODEL = "Review the Model's Text";

/** A model's file that failed validation where the deterministic merge validated: a modal with the
 * model's reasons offers either text as a preview (Accept applies it); the merge is marked as not
 * confirmed by the model. Closing it changes nothing. */
async function reviewCandidate(previews: Previews, result: Result & { version: number }, candidate: Reading): Promise<void> {
  const target = Uri.parse(result.uri);
  const reasons = validationReasons(result.validation).join("; ");
  const choice = await window.showWarningMessage(
    `editapply: the model's edit of ${label(target)} failed validation: ${reasons}`,
    { modal: true, detail: `${candidate.label[0].toUpperCase()}${candidate.label.slice(1)}. Review either text before ` +
      "applying it." },
    REVIEW_MERGE, REVIEW_MODEL);
  if (choice === REVIEW_MERGE) {
    await previews.show({ target, version: result.version, merged: candidate.merged }, "merge not confirmed by the model");
  } else if (choice === REVIEW_MODEL) {
    await previews.show({ target, version: result.version, merged: result.merged }, "validation failed");
  }
}

const DIFF_BUTTON = { iconPath: new ThemeIcon("diff"), tooltip: "Show the diff first (Accept applies it)" };

/** The reading the user picks (`diff`: with its diff button), or undefined on Escape. */
function pickReading(readings: Reading[], file: string, withDiff: boolean): Promise<{ index: number; diff: boolean } | undefined> {
  const pick = window.createQuickPick<QuickPickItem & { index: number }>();
  pick.title = `editapply: the snippet can be read ${readings.length} ways in ${file}; which is meant?`;
  pick.items = readingItems(readings).map((item, index) => ({ ...item, index, buttons: withDiff ? [DIFF_BUTTON] : [] }));
  pick.matchOnDescription = pick.matchOnDetail = true;
  return new Promise((resolve) => {
    let picked: { index: number; diff: boolean } | undefined;
    pick.onDidAccept(() => {
      const item = pick.activeItems[0];
      if (item !== undefined) picked = { index: item.index, diff: false };
      pick.hide();
    });
    pick.onDidTriggerItemButton(({ item }) => {
      picked = { index: item.index, diff: true };
      pick.hide();
    });
    pick.onDidHide(() => {
      pick.dispose();
      resolve(picked);
    });
    pick.show();
  });
}

/** A previewed (or picked) text applied as is, if the document is still at its version. */
async function applyMerged(client: Client, { target, version, merged }: Preview): Promise<boolean> {
  const result = await run<ApplyResult>(client, "editapply.applyMerged", { uri: target.toString(), version, merged });
  if (result === undefined) return false; // e.g. stale: the error says why
  window.setStatusBarMessage(describeResult(result, label(target)), 8000);
  return true;
}

export async function applyClipboard(client: Client, previews: Previews): Promise<void> {
  const editor = activeEditor();
  if (editor === undefined) return;
  const snippet = await env.clipboard.readText();
  if (snippet.trim() === "") {
    void window.showWarningMessage("editapply: the clipboard is empty: copy the edit snippet first");
    return;
  }
  await apply(client, previews, editor.document.uri, snippet);
}

/** The selection (or the fenced block under the cursor) of this editor, applied to another file:
 * the one the snippet names comes first in the pick list. */
export async function applySelectionToFile(client: Client, previews: Previews): Promise<void> {
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
  const ranked = rankTargets(namedFile(snippet), [...byPath.keys()], fenceLanguage(snippet));
  const browse = "$(folder-opened) Other file…";
  const picked = await window.showQuickPick(
    [...ranked.map((p) => ({ label: path.basename(p), description: label(byPath.get(p)!), uri: byPath.get(p) })),
     { label: browse, description: "", uri: undefined }],
    { title: "editapply: apply the snippet to which file?" });
  if (picked === undefined) return;
  const target = picked.uri ?? (await window.showOpenDialog({ canSelectMany: false, openLabel: "Apply to" }))?.[0];
  if (target === undefined) return;
  await window.showTextDocument(await workspace.openTextDocument(target), { preview: false });
  await apply(client, previews, target, snippet);
}

/** The clipboard's snippet merged into this file and shown as a diff; nothing changes before Accept.
 * An ambiguous snippet's readings are offered first; the one picked is shown. */
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
  const readings = readingsToPick(result);
  if (readings.length > 0) {
    const picked = await pickReading(readings, label(document.uri), false);
    if (picked !== undefined) {
      await previews.show({ target: document.uri, version: result.version, merged: readings[picked.index].merged },
                          `reading ${picked.index + 1}`);
    }
    return;
  }
  const candidate = candidateToReview(result);
  if (candidate !== undefined) {
    await reviewCandidate(previews, { ...result, version: result.version }, candidate);
    return;
  }
  const failed = !result.validation.ok;
  if (failed) {
    const reasons = validationReasons(result.validation);
    void window.showWarningMessage(`editapply: the merged text failed validation: ${reasons.join("; ")}`);
  }
  await previews.show({ target: document.uri, version: result.version, merged: result.merged },
                      failed ? "validation failed" : undefined);
}

export async function acceptPreview(client: Client, previews: Previews, uri?: Uri): Promise<void> {
  const shown = previews.active(uri);
  if (shown === undefined) return;
  if (!(await applyMerged(client, shown.preview))) return; // the preview stays open
  await previews.close(shown.uri);
  await window.showTextDocument(shown.preview.target, { preview: false });
}

/** editapply.hunks: what is left to review of `merged` against the document as it is now. */
interface Review {
  version: number;
  merged: string;
  hunks: Hunk[];
}

/** Per-hunk review: the change under the cursor (either side of the active preview's diff) applied
 * alone (`accept`), else put back as the document has it; the diff then shows what is left, and
 * closes when nothing is. */
export async function reviewChange(client: Client, previews: Previews, accept: boolean): Promise<void> {
  const shown = previews.active();
  const editor = window.activeTextEditor;
  if (shown === undefined || editor === undefined) return;
  const uri = shown.preview.target.toString();
  const now = await run<Review>(client, "editapply.hunks", { uri, merged: shown.preview.merged });
  if (now === undefined) return;
  const k = hunkAt(now.hunks, editor.selection.active.line, editor.document.uri.scheme === SCHEME ? "new" : "old");
  if (k === null) {
    void window.showInformationMessage("editapply: no change under the cursor: put it on a changed line of the diff");
    return;
  }
  if (accept) {
    const done = await run<ApplyResult>(client, "editapply.applyMerged", { uri, version: now.version, merged: now.merged, hunks: [k] });
    if (done === undefined) return;
    window.setStatusBarMessage(describeResult(done, label(shown.preview.target)), 8000);
  }
  const left = await run<Review>(client, "editapply.hunks", { uri, merged: now.merged, ...(accept ? {} : { drop: [k] }) });
  if (left === undefined) return;
  if (left.hunks.length === 0) {
    await previews.close(shown.uri);
    window.setStatusBarMessage(`editapply: every change to ${label(shown.preview.target)} reviewed`, 8000);
    return;
  }
  previews.update(shown.uri, { target: shown.preview.target, version: left.version, merged: left.merged });
}

export async function rejectPreview(previews: Previews, uri?: Uri): Promise<void> {
  const shown = previews.active(uri);
  if (shown !== undefined) await previews.close(shown.uri);
}

export async function ask(client: Client, pages: Pages): Promise<void> {
  const editor = activeEditor();
  if (editor === undefined) return;
  const question = await window.showInputBox({ title: `editapply: ask about ${label(editor.document.uri)}`,
                                               prompt: "The answer is drafted from the file itself" });
  if (!question?.trim()) return;
  const result = await run<{ answer: string }>(client, "editapply.ask", { question, uri: editor.document.uri.toString() });
  if (result === undefined) return;
  await pages.show(`editapply answer on ${path.basename(editor.document.uri.path)}.md`,
                   `**${question.trim()}**\n\n${result.answer}\n`);
}

export async function showStatus(client: Client, pages: Pages): Promise<void> {
  const status = await run<object>(client, "editapply.status", {});
  if (status !== undefined) await pages.show("editapply status.json", JSON.stringify(status, null, 2) + "\n");
}
