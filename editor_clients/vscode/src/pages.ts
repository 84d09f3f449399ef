// Read-only pages the extension shows beside the editor (an answer, the server's status): documents
// of the scheme `editapply-page`, which closing never asks to save (an Untitled document did).
import { Uri, ViewColumn, window, workspace } from "vscode";
import type { Disposable, TextDocumentContentProvider } from "vscode";

export const PAGE_SCHEME = "editapply-page";
const KEPT = 32; // pages remembered (a page's tab reopened after that shows it empty)

export class Pages implements TextDocumentContentProvider, Disposable {
  private readonly pages = new Map<string, string>();
  private readonly registration: Disposable;
  private count = 0;

  constructor() {
    this.registration = workspace.registerTextDocumentContentProvider(PAGE_SCHEME, this);
  }

  provideTextDocumentContent(uri: Uri): string {
    return this.pages.get(uri.toString()) ?? "";
  }

  /** `content` in a read-only tab beside the editor, named `name` (its extension sets the language). */
  async show(name: string, content: string): Promise<void> {
    const uri = Uri.from({ scheme: PAGE_SCHEME, path: `/${name}`, query: `n=${++this.count}` });
    this.pages.set(uri.toString(), content);
    for (const key of [...this.pages.keys()].slice(0, Math.max(0, this.pages.size - KEPT))) this.pages.delete(key);
    await window.showTextDocument(await workspace.openTextDocument(uri), { viewColumn: ViewColumn.Beside, preview: true });
  }

  dispose(): void {
    this.registration.dispose();
  }
}
