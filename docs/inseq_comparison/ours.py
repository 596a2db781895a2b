import json, os, pathlib, sequence_salience as ss
from sequence_salience.model import convert_gguf, default_gguf_path
from sequence_salience.display import share
folder = convert_gguf(default_gguf_path())
lm = ss.load_model("default")
chat = lm.format_prompt("What is the capital of France?", chat=True) if hasattr(lm, "format_prompt") else None
gen = lm.generate(chat)
result = ss.compute_salience(lm, chat, gen, methods=("grad_x_input",))
pe = result.prompt_end
os.makedirs("/tmp/h7cmp", exist_ok=True)
share.write_share(result, pathlib.Path(__file__).with_name("ours_share.html"), "grad_x_input", "token", model="default")
json.dump({"folder": str(folder), "prompt": result.text[:pe], "response": result.text[pe:],
           "tokens": list(result.tokens), "n_prompt": int(result.n_prompt_tokens),
           "matrix": [list(map(float, r)) for r in result.matrices["grad_x_input"]]}, open("/tmp/h7cmp/ours.json", "w"))
print(repr(result.text[pe:]), result.n_prompt_tokens, len(result.tokens))
