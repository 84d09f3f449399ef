// The server's work-done progress (a model run: "120/590 tokens · 61.8 tok/s · 15.2 tokens/step")
// as a notification with a Cancel button, which sends `window/workDoneProgress/cancel`: the server
// stops the generation and the command fails as cancelled. vscode-languageclient would show it in
// the status bar, where it cannot be cancelled; this handler replaces its own.
import { ProgressLocation, window } from "vscode";
import type { Disposable } from "vscode";
import {
  WorkDoneProgress, WorkDoneProgressCancelNotification, WorkDoneProgressCreateRequest,
} from "vscode-languageclient/node";
import type { LanguageClient, ProgressToken } from "vscode-languageclient/node";

export function showProgress(client: LanguageClient): Disposable {
  return client.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => follow(client, token));
}

function follow(client: LanguageClient, token: ProgressToken): void {
  let report: ((message?: string, percentage?: number) => void) | undefined;
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => { finish = resolve; });
  let shown = 0;
  const subscription = client.onProgress(WorkDoneProgress.type, token, (value) => {
    if (value.kind === "begin") {
      void window.withProgress(
        { location: ProgressLocation.Notification, title: value.title, cancellable: value.cancellable ?? false },
        (progress, cancel) => {
          cancel.onCancellationRequested(() =>
            void client.sendNotification(WorkDoneProgressCancelNotification.type, { token }));
          report = (message, percentage) => {
            const increment = percentage !== undefined && percentage > shown ? percentage - shown : undefined;
            shown = Math.max(shown, percentage ?? 0);
            progress.report({ message, increment });
          };
          report(value.message, value.percentage);
          return finished;
        });
    } else if (value.kind === "report") {
      report?.(value.message, value.percentage);
    } else {
      subscription.dispose();
      finish();
    }
  });
}
