// Drives a running code-server (real VS Code in the browser) through Debian's Chromium, as a user
// would: Quick Open the file, put the snippet on the clipboard, run an editapply command from the
// command palette, and for a preview click Accept in the diff editor's title. Writes what it saw
// as JSON (test_vscode.py asserts on it) and screenshots.
//
//   node drive.mjs CONFIG.json   CONFIG: {url, file, snippet, question?, chat?, chatLine?, chromium, report,
//                                 screenshot, failureScreenshot, scenario: apply|selection|preview|cancel|
//                                 readings|readingsDiff|readingsCodeAction|invalidApply|invalidPreview|
//                                 candidate|hunks|status}
import { readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { chromium } from "playwright-core";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const STEP_TIMEOUT_MS = 60_000; // a generous bound for one UI step on a loaded 2-core machine
const report = { steps: [], notifications: [] };
// The file's own tab (the preview's diff tab starts with the same name).
const fileTab = `.tabs-container .tab[aria-label^="${path.basename(config.file)}"]:not(:has-text("editapply preview"))`;

const browser = await chromium.launch({
  executablePath: config.chromium,
  // As root Chromium needs --no-sandbox; the rest keeps it off the (closed) network.
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 760 } });
await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: new URL(config.url).origin });
const page = await context.newPage();
page.setDefaultTimeout(STEP_TIMEOUT_MS);

const step = (name) => report.steps.push(name);
const disk = () => readFileSync(config.file, "utf8");

async function palette(command) {
  await page.keyboard.press("F1");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible" });
  await input.fill(`>${command}`);
  // Clicked by its label: Enter would take whatever row is first (recently used ones come first).
  await page.locator(".quick-input-list .monaco-list-row", { hasText: command }).first().click();
}

async function quickOpen(file) {
  await page.keyboard.press("Control+P");
  await page.locator(".quick-input-widget input").fill(path.basename(file));
  await page.locator(".quick-input-list .monaco-list-row", { hasText: path.basename(file) }).first().click();
  await page.locator(`.tabs-container .tab.active[aria-label^="${path.basename(file)}"]`).waitFor();
}

async function saveAndRead() {
  await page.keyboard.press("Control+S");
  await page.locator(`${fileTab}:not(.dirty)`).waitFor();
  return disk();
}

// An ambiguous snippet's pick list (editor_clients/vscode/src/commands.ts), and its rows.
const readingsPick = page.locator(".quick-input-widget", { hasText: "which is meant?" });
const readingRow = (n) => page.locator(".quick-input-list .monaco-list-row", { hasText: `Reading ${n}` });
const previewTab = page.locator(".tabs-container .tab", { hasText: "editapply preview" });

async function readings() {
  await readingsPick.waitFor();
  await readingRow(1).waitFor();
  return {
    title: await readingsPick.locator(".quick-input-title").innerText(),
    items: await page.locator(".quick-input-list .monaco-list-row").filter({ visible: true }).allInnerTexts(),
  };
}

// A preview's title-bar button by its command's title ("Accept", not "Accept Change at Cursor"):
// its label is the title, then the key in parentheses.
const titleButton = (title) => page.locator(".editor-actions a.action-label")
  .filter({ has: page.locator("xpath=self::*[starts-with(@aria-label, '" + title + " (') or @aria-label='" + title + "']") });

async function moveToLine(line) {
  await page.keyboard.press("Control+G");
  await page.locator(".quick-input-widget input").fill(`:${line}`);
  await page.locator(".quick-input-list .monaco-list-row", { hasText: `line ${line}` }).waitFor();
  await page.keyboard.press("Enter");
  await page.locator(".statusbar", { hasText: `Ln ${line},` }).waitFor();
}

try {
  await page.goto(config.url);
  await page.locator(".monaco-workbench").waitFor();
  await palette("View: Close Primary Side Bar"); // room for the editor (and the screenshot)
  step("workbench");

  await quickOpen(config.file);
  await page.locator(".monaco-editor .view-lines").first().click(); // focus the editor
  step("opened");

  await page.evaluate((text) => navigator.clipboard.writeText(text), config.snippet);
  step("clipboard");

  if (config.scenario === "apply") {
    await palette("editapply: Apply Clipboard to Current File");
    await page.locator(`${fileTab}.dirty`).waitFor(); // the edit landed in the document
    report.diskBeforeSave = disk(); // the server never writes files
    step("applied");
    await page.screenshot({ path: config.screenshot });
    report.saved = await saveAndRead();
  } else if (config.scenario === "selection") {
    // A chat answer in another file, the cursor in its fenced block (no selection needed).
    await quickOpen(config.chat);
    await moveToLine(config.chatLine);
    await palette("editapply: Apply Selection to File…");
    await page.locator(".quick-input-widget", { hasText: "apply the snippet to which file?" }).waitFor();
    const first = page.locator(".quick-input-list .monaco-list-row").filter({ visible: true }).first();
    await first.waitFor();
    report.firstTarget = await first.innerText(); // the file the fence names comes first
    await first.click();
    await page.locator(`${fileTab}.active.dirty`).waitFor();
    report.diskBeforeSave = disk();
    step("applied");
    report.saved = await saveAndRead();
  } else if (config.scenario === "cancel") {
    // A model run: its progress is a notification with a Cancel button (src/progress.ts).
    await palette("editapply: Ask About This File");
    await page.locator(".quick-input-widget input").fill(config.question);
    await page.keyboard.press("Enter");
    const toast = page.locator(".notifications-toasts .notification-toast", { hasText: "editapply: ask" });
    await toast.getByText("tok/s").first().waitFor(); // the figures of a running generation
    report.progress = await toast.innerText();
    step("progress");
    await page.screenshot({ path: config.screenshot });
    await toast.getByRole("button", { name: "Cancel" }).click();
    await page.locator(".statusbar", { hasText: "editapply: cancelled" }).waitFor();
    report.toastsAfterCancel = await page.locator(".notifications-toasts .notification-toast", { hasText: "editapply: ask" }).count();
    report.saved = disk();
  } else if (config.scenario === "readings") {
    // An ambiguous snippet: its readings in a pick list. Escape changes nothing; Reading 2 applies.
    await palette("editapply: Apply Clipboard to Current File");
    report.pick = await readings();
    await page.screenshot({ path: config.screenshot });
    await page.keyboard.press("Escape");
    await readingsPick.waitFor({ state: "hidden" });
    await page.waitForTimeout(1000); // an edit would land by now
    report.dirtyAfterEscape = await page.locator(`${fileTab}.dirty`).count() > 0;
    report.diskAfterEscape = disk();
    step("escaped");
    await palette("editapply: Apply Clipboard to Current File");
    await readings();
    await readingRow(2).click();
    await page.locator(`${fileTab}.dirty`).waitFor();
    report.diskBeforeSave = disk();
    step("picked");
    report.saved = await saveAndRead();
  } else if (config.scenario === "readingsDiff") {
    // Preview Apply: the reading picked is shown as a diff (Reject closes it). Apply Clipboard: a
    // reading's diff button shows it first, and Accept applies it.
    await palette("editapply: Preview Apply");
    report.pick = await readings();
    await readingRow(2).click();
    await page.locator(".tabs-container .tab.active", { hasText: "editapply preview (reading 2)" }).waitFor();
    report.diskDuringPreview = disk();
    report.fileTabDirtyDuringPreview = await page.locator(`${fileTab}.dirty`).count() > 0;
    await titleButton("Reject").click();
    await previewTab.waitFor({ state: "detached" });
    await page.locator(`${fileTab}.active`).waitFor();
    step("rejected");
    await palette("editapply: Apply Clipboard to Current File");
    await readings();
    await readingRow(2).hover();
    await readingRow(2).getByRole("button", { name: /Show the diff/ }).click();
    await page.locator(".tabs-container .tab.active", { hasText: "editapply preview (reading 2)" }).waitFor();
    report.fileTabDirtyBeforeAccept = await page.locator(`${fileTab}.dirty`).count() > 0;
    await titleButton("Accept").click();
    await previewTab.waitFor({ state: "detached" });
    await page.locator(`${fileTab}.dirty`).waitFor();
    report.diskBeforeSave = disk();
    step("accepted");
    report.saved = await saveAndRead();
  } else if (config.scenario === "readingsCodeAction") {
    // The server's code action ("Apply this snippet to FILE") on a chat file's fenced block: its
    // result comes back through the extension too, with the pick list.
    await quickOpen(config.chat);
    await moveToLine(config.chatLine);
    await page.locator(".lightBulbWidget").click(); // Ctrl+. lists quick fixes only; this is a refactoring
    // The only action, focused ("Enter to Apply"); playwright never finds the row stable enough to click.
    await page.locator(".action-widget .monaco-list-row.focused", { hasText: "Apply this snippet to" }).waitFor();
    await page.keyboard.press("Enter");
    report.pick = await readings();
    await readingRow(2).click();
    await page.locator(`${fileTab}.dirty`).waitFor();
    report.diskBeforeSave = disk();
    step("picked");
    await quickOpen(config.file);
    report.saved = await saveAndRead();
  } else if (config.scenario === "invalidApply") {
    // An apply that fails validation: the server's question is a modal dialog (it stays up);
    // Cancel leaves the file alone, and the next apply asks again (nothing stays locked).
    await palette("editapply: Apply Clipboard to Current File");
    const dialog = page.locator(".monaco-dialog-box", { hasText: "failed validation" });
    await dialog.waitFor();
    report.dialog = await dialog.innerText();
    report.modal = await page.locator(".monaco-dialog-modal-block").count() > 0;
    await dialog.getByRole("button", { name: "Cancel" }).click();
    await dialog.waitFor({ state: "detached" });
    await page.waitForTimeout(1000); // an edit would land by now
    report.dirtyAfterCancel = await page.locator(`${fileTab}.dirty`).count() > 0;
    await palette("editapply: Apply Clipboard to Current File");
    await dialog.waitFor();
    await dialog.getByRole("button", { name: "Apply anyway" }).click();
    await page.locator(`${fileTab}.dirty`).waitFor();
    report.saved = await saveAndRead();
  } else if (config.scenario === "candidate") {
    // Mode model, and the model's file fails validation where the merge validated: a modal offers
    // either text for review; the merge's preview is marked unconfirmed, and Accept applies it.
    await palette("editapply: Apply Clipboard to Current File");
    const dialog = page.locator(".monaco-dialog-box", { hasText: "failed validation" });
    await dialog.waitFor({ timeout: 3 * STEP_TIMEOUT_MS }); // the first model run loads the model
    report.dialog = await dialog.innerText();
    report.modal = await page.locator(".monaco-dialog-modal-block").count() > 0;
    await page.screenshot({ path: config.screenshot });
    await dialog.getByRole("button", { name: "Review the Merge" }).click();
    await page.locator(".tabs-container .tab.active", { hasText: "not confirmed by the model" }).waitFor();
    report.fileTabDirtyDuringPreview = await page.locator(`${fileTab}.dirty`).count() > 0;
    step("previewed");
    await titleButton("Accept").click();
    await previewTab.waitFor({ state: "detached" });
    await page.locator(`${fileTab}.dirty`).waitFor();
    report.saved = await saveAndRead();
  } else if (config.scenario === "hunks") {
    // Per-hunk review in the diff: accept the change on one line, reject the one on another.
    await palette("editapply: Preview Apply");
    await page.locator(".tabs-container .tab.active", { hasText: "editapply preview" }).waitFor();
    const modifiedLine = (text) => page.locator(".monaco-diff-editor .editor.modified .view-line", { hasText: text });
    await modifiedLine(config.accept).waitFor();
    await page.waitForTimeout(1000); // the diff computed
    await page.screenshot({ path: config.screenshot });
    await modifiedLine(config.accept).click();
    await palette("editapply: Accept Change at Cursor");
    await page.locator(`${fileTab}.dirty`).waitFor();
    report.diskDuringReview = disk();
    step("accepted one");
    await modifiedLine(config.reject).click();
    await palette("editapply: Reject Change at Cursor");
    await previewTab.waitFor({ state: "detached" });
    step("rejected the other");
    report.saved = await saveAndRead();
  } else if (config.scenario === "status") {
    // Show Server Status: a read-only page beside the file; closing it asks nothing.
    await palette("editapply: Show Server Status");
    const tab = page.locator(".tabs-container .tab.active", { hasText: "editapply status.json" });
    await tab.waitFor();
    report.statusTab = await tab.getAttribute("aria-label");
    report.statusDirty = await page.locator(".tabs-container .tab.active.dirty").count() > 0;
    report.statusText = await page.locator(".monaco-editor .view-lines").last().innerText();
    await palette("View: Close Editor");
    await tab.waitFor({ state: "detached" });
    await page.waitForTimeout(500); // a save question would be up by now
    report.dialogs = await page.locator(".monaco-dialog-box").count();
    report.saved = disk();
  } else if (config.scenario === "invalidPreview") {
    // A merge that fails validation: the preview says why, in the server's words.
    await palette("editapply: Preview Apply");
    const warning = page.locator(".notifications-toasts .notification-toast", { hasText: "failed validation" });
    await warning.waitFor();
    report.warning = await warning.locator(".notification-list-item-message").innerText();
    await page.locator(".tabs-container .tab.active", { hasText: "editapply preview (validation failed)" }).waitFor();
    report.saved = disk();
  } else {
    await palette("editapply: Preview Apply");
    const diff = page.locator(".monaco-diff-editor").first();
    await diff.waitFor();
    await page.locator(".tabs-container .tab.active", { hasText: "editapply preview" }).waitFor();
    await page.waitForTimeout(1500); // let the diff decorations settle for the screenshot
    await page.screenshot({ path: config.screenshot });
    report.fileTabDirtyDuringPreview = await page.locator(`${fileTab}.dirty`).count() > 0;
    report.diskDuringPreview = disk();
    step("previewed");

    await titleButton("Accept").click();
    await page.locator(".tabs-container .tab", { hasText: "editapply preview" }).waitFor({ state: "detached" });
    await page.locator(`${fileTab}.dirty`).waitFor();
    report.diskBeforeSave = disk();
    step("accepted");
    report.saved = await saveAndRead();
  }
  step("saved");
} catch (error) {
  report.error = String(error?.stack ?? error);
  await page.screenshot({ path: config.failureScreenshot }).catch(() => {});
} finally {
  report.notifications = await page.locator(".notifications-toasts .notification-list-item-message")
    .allInnerTexts().catch(() => []);
  report.statusbar = await page.locator(".statusbar").innerText().catch(() => "");
  writeFileSync(config.report, JSON.stringify(report, null, 2));
  await browser.close();
}
