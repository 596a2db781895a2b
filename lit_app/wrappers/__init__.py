"""The LIT model wrappers over the shared model (wrapper.py `Wrapper`): salience, compare, explain,
inside, generation, tokenizer, with the salience requests and payloads they read and write."""
