import {getLlama} from "node-llama-cpp";
const llama = await getLlama({gpu: false, build: "never"});
const model = await llama.loadModel({modelPath: process.argv[2]});
const text = "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she found a big red ball under a tree.";
console.log([model.tokens.bos, ...model.tokenize(text)].join(","));
process.exit(0);
