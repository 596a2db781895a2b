import json, inseq, torch
d = json.load(open("/tmp/h7cmp/ours.json"))
model = inseq.load_model(d["folder"], "input_x_gradient")
out = model.attribute(input_texts=d["prompt"], generated_texts=d["prompt"] + d["response"], skip_special_tokens=False)
a = out.sequence_attributions[0]
src = a.source_attributions  # [src, tgt, hidden] or aggregated
tgt = a.target_attributions
print("source", None if src is None else tuple(src.shape), "target", None if tgt is None else tuple(tgt.shape))
agg = out.aggregate()
s0 = agg.sequence_attributions[0]
print("agg source", tuple(s0.source_attributions.shape) if s0.source_attributions is not None else None,
      "agg target", tuple(s0.target_attributions.shape) if s0.target_attributions is not None else None)
print([t.token for t in s0.source][:40])
print([t.token for t in s0.target][-8:])
raw = a.target_attributions.sum(-1)  # signed grad x input per token, [42, 7]
rawl2 = a.target_attributions.norm(dim=-1)
json.dump({"raw": raw.tolist(), "rawl2": rawl2.tolist(), "tok": [t.token for t in a.target], "source": [t.token for t in s0.source], "target": [t.token for t in s0.target],
           "src": None if s0.source_attributions is None else s0.source_attributions.tolist(),
           "tgt": None if s0.target_attributions is None else s0.target_attributions.tolist()}, open("/tmp/h7cmp/inseq.json", "w"))
