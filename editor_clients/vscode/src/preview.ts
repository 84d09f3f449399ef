// "Preview Apply": VS Code's diff editor between the document (left, as the editor holds it) and the
// merged text the server previewed (right, read-only, scheme `editapply-preview`). Accept sends the
// merged text through `editapply.applyMerged` (minimal edits, refused if the document changed since
// the preview); Reject closes the diff. Nothing touches the document before Accept.
import * as path from "node:path";
import { commands, EventEmitter, TabInputTextDiff, Uri, window, workspace } from "vscode";
import type { Disposable, TextDocumentContentProvider } from "vscode";

export const SCHEME = "editapply-preview";
const OPEN_CONTEXT = "editapply.previewOpen";

export interface Preview {
  target: Uri; // the document the merged text is for
  version: number; // its version when previewed: applyMerged checks it
  merged: string;
}

export class Previews implements TextDocumentContentProvider, Disposable {
  private readonly previews = new Map<string, Preview>();
  private readonly shown = new Set<string>(); // previews whose tab has opened
  private readonly changed = new EventEmitter<Uri>();
  private readonly subscriptions: Disposable[];
  private count = 0;
  readonly onDidChange = this.changed.event;

  constructor() {
    this.subscriptions = [
      workspace.registerTextDocumentContentProvider(SCHEME, this),
      window.tabGroups.onDidChangeTabs(() => this.forgetClosed()),
    ];
  }

  provideTextDocumentContent(uri: Uri): string {
    return this.previews.get(uri.toString())?.merged ?? "";
  }

  /** Open the diff editor for `preview`; `note` goes in the tab title (e.g. "validation failed"). */
  async show(preview: Preview, note?: string): Promise<void> {
    // The preview keeps the file's name, so the right side gets the same language as the left.
    const uri = Uri.from({ scheme: SCHEME, path: preview.target.path, query: `n=${++this.count}` });
    this.previews.set(uri.toString(), preview);
    const title = `${path.basename(preview.target.path)} ↔ editapply preview${note ? ` (${note})` : ""}`;
    await commands.executeCommand("vscode.diff", preview.target, uri, title, { preview: false });
    await commands.executeCommand("setContext", OPEN_CONTEXT, true);
  }

  /** What the preview at `uri` proposes now (per-hunk review took or dropped a change): its diff updates. */
  update(uri: Uri, preview: Preview): void {
    this.previews.set(uri.toString(), preview);
    this.changed.fire(uri);
  }

  /** The preview shown in the active tab (or named by `uri`, as an editor/title button passes it). */
  active(uri?: Uri): { uri: Uri; preview: Preview } | undefined {
    const input = window.tabGroups.activeTabGroup.activeTab?.input;
    const candidate = uri?.scheme === SCHEME ? uri : input instanceof TabInputTextDiff ? input.modified : undefined;
    const preview = candidate && this.previews.get(candidate.toString());
    return candidate && preview ? { uri: candidate, preview } : undefined;
  }

  /** Close the diff tab of the preview at `uri` and forget it. */
  async close(uri: Uri): Promise<void> {
    const tabs = window.tabGroups.all.flatMap((g) => g.tabs).filter(
      (t) => t.input instanceof TabInputTextDiff && t.input.modified.toString() === uri.toString());
    await window.tabGroups.close(tabs);
    this.forget(uri.toString());
    await this.updateContext();
  }

  private forgetClosed(): void {
    const open = new Set(window.tabGroups.all.flatMap((g) => g.tabs).map((t) =>
      t.input instanceof TabInputTextDiff ? t.input.modified.toString() : ""));
    for (const key of this.previews.keys()) {
      if (open.has(key)) this.shown.add(key);
      else if (this.shown.has(key)) this.forget(key);
    }
    void this.updateContext();
  }

  private forget(key: string): void {
    this.previews.delete(key);
    this.shown.delete(key);
  }

  private async updateContext(): Promise<void> {
    await commands.executeCommand("setContext", OPEN_CONTEXT, this.previews.size > 0);
  }

  dispose(): void {
    this.subscriptions.forEach((s) => s.dispose());
    this.changed.dispose();
  }
}
