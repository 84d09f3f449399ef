// VS Code settings -> what `editapply lsp` takes. No `vscode` import: unit-tested with node's runner.
//
// The server reads flat camelCase keys from initializationOptions and
// workspace/didChangeConfiguration (lsp_server/settings.py); a key sent as null goes back to its
// default, so every key is always sent. `editapply.server.*` only says how to start the server and
// is never sent. The API key comes from SecretStorage, never from settings.json. `pickReadings`
// is no user setting: this client always shows an ambiguous snippet's readings itself.

/** What the server is sent (lsp_server/settings.py's keys). */
export interface ServerSettings {
  engineUrl: string | null;
  apiKey: string | null;
  model: string | null;
  backend: string | null;
  vllmUrl: string | null;
  mode: string | null;
  promptForm: string | null;
  maxTokens: number | null;
  pickReadings: true; // an ambiguous snippet's readings come back to us to offer (commands.ts)
}

/** Reads one `editapply.*` setting, e.g. `get("engineUrl")`. */
export type Read = (key: string) => unknown;

const text = (value: unknown): string | null =>
  typeof value === "string" && value.trim() !== "" ? value.trim() : null;

const positive = (value: unknown): number | null =>
  typeof value === "number" && Number.isInteger(value) && value > 0 ? value : null;

const url = (value: unknown): string | null => text(value)?.replace(/\/+$/, "") ?? null;

export function serverSettings(get: Read, apiKey: string | undefined): ServerSettings {
  return {
    engineUrl: url(get("engineUrl")),
    apiKey: text(apiKey),
    model: text(get("model")),
    backend: text(get("backend")),
    vllmUrl: url(get("vllmUrl")),
    mode: text(get("mode")),
    promptForm: text(get("promptForm")),
    maxTokens: positive(get("maxTokens")),
    pickReadings: true,
  };
}

/** How to reach the server: run a command over stdio, or connect to `editapply lsp --tcp`. */
export type Launch =
  | { kind: "stdio"; command: string; args: string[] }
  | { kind: "tcp"; host: string; port: number };

export const DEFAULT_COMMAND = ["editapply", "lsp"];

/** From `editapply.server.tcp` ("HOST:PORT"), else `editapply.server.pythonPath` (runs the
 * package with that interpreter), else `editapply.server.command`. Throws on a malformed value. */
export function serverLaunch(get: Read): Launch {
  const tcp = text(get("server.tcp"));
  if (tcp !== null) {
    const match = /^(.+):(\d{1,5})$/.exec(tcp);
    const port = match ? Number(match[2]) : 0;
    if (!match || port < 1 || port > 65535) {
      throw new Error(`editapply.server.tcp must be HOST:PORT, got ${JSON.stringify(tcp)}`);
    }
    return { kind: "tcp", host: match[1].replace(/^\[(.*)\]$/, "$1"), port };
  }
  const python = text(get("server.pythonPath"));
  if (python !== null) {
    return { kind: "stdio", command: python, args: ["-m", "engine.cli", "lsp"] };
  }
  const command = get("server.command");
  const words = Array.isArray(command) ? command.filter((w): w is string => typeof w === "string" && w !== "") : [];
  const [program, ...args] = words.length > 0 ? words : DEFAULT_COMMAND;
  return { kind: "stdio", command: program, args };
}

/** Where `program` would run from: itself when it names a path, else the first directory of
 * `pathList` (PATH) that holds it as an executable; null when none does. `isExecutable` is
 * injected (fs.accessSync with X_OK in the extension) so this stays free of I/O. */
export function findProgram(program: string, pathList: string, isExecutable: (file: string) => boolean,
                            separator = ":"): string | null {
  if (program.includes("/") || program.includes("\\")) return isExecutable(program) ? program : null;
  for (const dir of pathList.split(separator)) {
    const file = `${dir === "" ? "." : dir.replace(/\/+$/, "")}/${program}`;
    if (isExecutable(file)) return file;
  }
  return null;
}
