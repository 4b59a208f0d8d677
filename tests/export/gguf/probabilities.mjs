// llama.cpp's next-token distributions for a GGUF file, through node-llama-cpp (pinned in
// package.json beside this file; tests/export/tst_gguf_runtime.cpp runs it):
//   node probabilities.mjs MODEL.gguf IDS.txt OUT.f32 [TEXT.txt]
// IDS.txt: comma-separated token ids (BOS first, as the test gives them). OUT.f32: for every id,
// the distribution of the next token over the whole vocabulary, float32, row after row. Prints one
// JSON line: {"vocab", "positions", "text_ids"} where text_ids is llama.cpp's own tokenization of
// TEXT.txt (no BOS), for the test to compare with the tokenizer the run was made with.
// The context keeps K and V in float32 and computes attention without flash attention, so that
// the only rounding llama.cpp adds to the file's weights is its quantization of the activations
// that meet quantized weights (Q8_0 on the CPU); the test models that rounding.
import {getLlama} from "node-llama-cpp";
import {readFileSync, writeFileSync} from "node:fs";

const [modelPath, idsPath, outPath, textPath] = process.argv.slice(2);
const ids = readFileSync(idsPath, "utf8").trim().split(",").map(Number);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({
  contextSize: ids.length, batchSize: ids.length, flashAttention: false,
  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
const sequence = context.getSequence();
const evaluated = await sequence.controlledEvaluate(ids.map(t => [t, {generateNext: {probabilities: true}}]));
const rows = evaluated.map((r, i) => {
  const p = r?.next?.probabilities;
  if (!p) throw new Error(`llama.cpp returned no distribution at position ${i}`);
  return p;
});
const size = rows[0].size; // every token of the vocabulary
const out = new Float32Array(rows.length * size);
rows.forEach((p, i) => { for (const [token, prob] of p) out[i * size + token] = prob; });
writeFileSync(outPath, Buffer.from(out.buffer));
const textIds = textPath ? model.tokenize(readFileSync(textPath, "utf8")) : [];
console.log(JSON.stringify({vocab: size, positions: rows.length, text_ids: textIds}));
await llama.dispose();
process.exit(0);
