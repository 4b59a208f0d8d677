import {getLlama} from "node-llama-cpp";
const [file, idsText] = process.argv.slice(2);
const ids = idsText.split(",").map(Number);
const llama = await getLlama({gpu: false, build: "never"});
const model = await llama.loadModel({modelPath: file});
const ctx = await model.createContext({contextSize: 512, batchSize: 512});
const seq = ctx.getSequence();
const items = ids.map(t => [t, {generateNext: {probabilities: true}}]);
const res = await seq.controlledEvaluate(items);
let nll = 0, n = 0;
for (let i = 0; i + 1 < ids.length; ++i) {
  const p = res[i].next.probabilities.get(ids[i + 1]) ?? 0;
  nll -= Math.log(p); ++n;
}
console.log(JSON.stringify({vocab: model.tokens ? undefined : null, n, nll, ppl: Math.exp(nll / n),
  first: [...res[0].next.probabilities.entries()].slice(0, 5)}));
process.exit(0);
