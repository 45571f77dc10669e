// Runs a GGUF model in llama.cpp (through node-llama-cpp's prebuilt CPU libraries, offline) and
// prints what dqt's interop test and `dqt bench generate` compare against, as one JSON object.
//
//   node tools/llamacpp/interop.mjs REQUEST.json
//
// REQUEST: {"model": path, "threads": n, "context": n, "kv_cache": "F32" (default) or "F16",
//           "prompts": [[ids...], ...], "greedy_tokens": n,      -> "prompts": [{"logits", "greedy"}]
//           "sequences": [[ids...], ...],                          -> "sequences": [[logits at every position]]
//           "sequence_chunk": n (optional: evaluate sequences n tokens at a time, not in one batch)
//           "texts": ["...", ...],                                 -> "tokenized": [[ids...], ...]
//           "bench": {"prompt_tokens": [ids...], "decode_tokens": n, "repeats": n}}  (optional)
// Always -> "vocab" and "model": what llama.cpp made of the file: "description" (llama_model_desc:
// architecture, size and llama_ftype_name, which says "(guessed)" when general.file_type is
// absent), "file_type" (the key as node-llama-cpp's GGUF reader sees it), "bos" and "eos"
// (llama_vocab_bos/eos as node-llama-cpp passes them on: only control tokens, else null) and
// "end_of_generation" (every id for which llama_vocab_is_eog holds: what stops generation).
// No BOS is added anywhere: the ids go in exactly as given.
import {readFileSync} from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const request = JSON.parse(readFileSync(process.argv[2], "utf8"));
const threads = request.threads ?? 1;
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
                              progressLogs: false, maxThreads: threads, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: request.model, gpuLayers: 0});
const contextSize = request.context ?? 256;
const context = await model.createContext({
    contextSize, batchSize: contextSize, sequences: 1, threads: {ideal: threads, min: threads},
    flashAttention: false, ignoreMemorySafetyChecks: true,
    // F32 keys and values unless the request names F16 (as `dqt bench generate --kv-cache f16`
    // runs): the comparisons of logits need dqt's fp32 values.
    experimentalKvCacheKeyType: request.kv_cache ?? "F32", experimentalKvCacheValueType: request.kv_cache ?? "F32"});
const sequence = context.getSequence();
const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;

async function lastLogits(ids) {
    await sequence.clearHistory();
    const input = ids.slice(0, -1);
    input.push([ids[ids.length - 1], {generateNext: {logits: true}}]);
    const result = await sequence.controlledEvaluate(input);
    const dense = new Array(vocab).fill(null);
    for (const [token, logit] of result[result.length - 1].next.logits) dense[token] = logit;
    return dense;
}

// Logits (vocab) after every position of ids, from one batch or from batches of `chunk` tokens
// (the sequence's cache carries over between them).
async function allLogits(ids, chunk) {
    await sequence.clearHistory();
    const rows = [];
    for (let first = 0; first < ids.length; first += chunk) {
        const part = ids.slice(first, first + chunk);
        const result = await sequence.controlledEvaluate(part.map((id) => [id, {generateNext: {logits: true}}]));
        for (const item of result) {
            const dense = new Array(vocab).fill(null);
            for (const [token, logit] of item.next.logits) dense[token] = logit;
            rows.push(dense);
        }
    }
    return rows;
}

async function greedy(ids, count) {
    await sequence.clearHistory();
    const out = [];
    if (count === 0) return out;
    for await (const token of sequence.evaluate(ids, {temperature: 0, yieldEogToken: true})) {
        out.push(token);
        if (out.length >= count) break;
    }
    return out;
}

const response = {
    vocab,
    model: {description: model.typeDescription, file_type: model.fileInfo.metadata.general?.file_type ?? null,
            bos: model.tokens.bos, eos: model.tokens.eos,
            end_of_generation: Array.from({length: vocab}, (_, id) => id).filter((id) => model.isEogToken(id))},
    prompts: [], sequences: [], tokenized: []};
for (const ids of request.prompts ?? [])
    response.prompts.push({logits: await lastLogits(ids), greedy: await greedy(ids, request.greedy_tokens ?? 0)});
for (const ids of request.sequences ?? [])
    response.sequences.push(await allLogits(ids, request.sequence_chunk ?? ids.length));
for (const text of request.texts ?? []) response.tokenized.push(Array.from(model.tokenize(text)));

if (request.bench) {
    // Best of `repeats`: prompt processing of prompt_tokens in one batch, then decode_tokens greedy steps.
    const {prompt_tokens: prompt, decode_tokens: decode, repeats = 3} = request.bench;
    let bestPrompt = Infinity, bestDecode = Infinity;
    for (let r = 0; r < repeats; ++r) {
        await sequence.clearHistory();
        let start = process.hrtime.bigint();
        const last = prompt.slice(0, -1);
        last.push([prompt[prompt.length - 1], {generateNext: {token: true}}]);
        const evaluated = await sequence.controlledEvaluate(last);
        bestPrompt = Math.min(bestPrompt, Number(process.hrtime.bigint() - start) / 1e9);
        let token = evaluated[evaluated.length - 1].next.token;
        start = process.hrtime.bigint();
        for (let i = 0; i < decode; ++i) {
            const step = await sequence.controlledEvaluate([[token, {generateNext: {token: true}}]]);
            token = step[0].next.token;
        }
        bestDecode = Math.min(bestDecode, Number(process.hrtime.bigint() - start) / 1e9);
    }
    response.bench = {prompt_tokens_per_second: prompt.length / bestPrompt,
                      decode_tokens_per_second: decode / bestDecode, threads};
}

process.stdout.write(JSON.stringify(response) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
