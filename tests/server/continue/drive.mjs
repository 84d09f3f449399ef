// Continue's own model adapters (@continuedev/openai-adapters, what its apply role calls) against
// a running `editapply serve`: the Relace provider (POST {apiBase}code/apply) and the OpenAI
// provider with Morph's message form. Reads a JSON config {url, original, snippet, refused: {original,
// snippet}, out};
// writes what each call gave (or the error it threw) to `out`, for tests/server/test_continue.py.
import fs from "node:fs";
import { constructLlmApi } from "@continuedev/openai-adapters";

const config = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const apiBase = `${config.url}/v1/`;
const signal = new AbortController().signal;
const relace = constructLlmApi({ provider: "relace", apiBase, apiKey: "unused" });
const openai = constructLlmApi({ provider: "openai", apiBase, apiKey: "unused" });

// As Continue's apply sends it: the file as the prediction, the snippet as the user's message.
const relaceBody = ({ original, snippet }) => ({
  model: "relace-apply-3", messages: [{ role: "user", content: snippet }],
  prediction: { type: "content", content: original },
});
const morphBody = ({ original, snippet }) => ({
  model: "morph-v3-fast",
  messages: [{ role: "user", content: `<code>${original}</code>\n<update>${snippet}</update>` }],
});

async function outcome(call) {
  try {
    return { content: await call() };
  } catch (error) {
    return { error: String(error?.message ?? error) };
  }
}

const text = (completion) => completion.choices[0].message.content;
async function streamed(body) {
  let content = "";
  for await (const chunk of openai.chatCompletionStream({ ...body, stream: true }, signal)) {
    content += chunk.choices[0]?.delta?.content ?? "";
  }
  return content;
}

const report = {
  relace: await outcome(async () => text(await relace.chatCompletionNonStream(relaceBody(config), signal))),
  morph: await outcome(async () => text(await openai.chatCompletionNonStream(morphBody(config), signal))),
  morphStream: await outcome(() => streamed(morphBody(config))),
  relaceRefused: await outcome(async () => text(await relace.chatCompletionNonStream(relaceBody(config.refused), signal))),
  morphRefused: await outcome(async () => text(await openai.chatCompletionNonStream(morphBody(config.refused), signal))),
};
fs.writeFileSync(config.out, JSON.stringify(report));
