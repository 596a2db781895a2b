import json, numpy as np
o = json.load(open("/tmp/h7cmp/ours.json")); q = json.load(open("/tmp/h7cmp/inseq.json"))
ours_tok = o["tokens"]; n_p = o["n_prompt"]; M = np.array(o["matrix"])  # [T=7, N=44]
keep = [i for i, t in enumerate(ours_tok) if t != "<|im_end|>"]
assert len(keep) == len(q["tok"]), (len(keep), len(q["tok"]))
raw = np.array(q["raw"])  # [42, 7]
raw = np.nan_to_num(raw)
for t in range(M.shape[0]):
    a = M[t, keep]; b = raw[:, t]
    mask = (a != 0) | (b != 0)
    r = np.corrcoef(a[mask], b[mask])[0, 1]
    print(f"row {t} {ours_tok[n_p+t]!r}: corr {r:.4f}, max|diff| {np.abs(a-b).max():.3g}, max|ours| {np.abs(a).max():.3g}")
l2 = np.nan_to_num(np.array(q["rawl2"]))
dot = raw.shape[1]-1
order = np.argsort(-np.abs(M[dot, keep]))[:5]
print("top |grad x input| for '.':", [(q["tok"][i], round(float(M[dot, keep][i]),3)) for i in order])
order2 = np.argsort(-l2[:, dot])[:5]
print("inseq default (L2 norm, normalised) top for '.':", [(q["tok"][i], round(float(np.array(q['tgt'])[i, dot]),3)) for i in order2])
