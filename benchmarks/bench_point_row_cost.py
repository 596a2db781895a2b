"""What a point row of an IG or SmoothGrad matrix costs against a gradient row (sampling.point_row_cost), through
the server's own code (SharedLM.salience with a job, as a matrix job runs), and the job's time left while its rows run.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_point_row_cost.py tiny|default REPS ig|sg COUNT

REPS: copies of a 50-token paragraph as the prompt. Prints one JSON line: the rows' stage (from the job's start, its
forward included) and the sampled stage in wall and CPU seconds, the per-row ratio, and, of the statuses read at each
report while the rows ran, how many held the true rest of the job (stderr: each (true rest, low, high)).
docs/benchmarks.md "Session 41 (h2)".
"""
import sys, time, json
import torch
from transformers import LlamaConfig, LlamaForCausalLM
import sequence_salience as ss
from sequence_salience.methods.base import SalienceConfig
from lit_app.model import shared_model, progressive
from tests.unit.tiny_models import tiny_tokenizer

PARA = ("The committee met on Tuesday to review the budget for the coming year. Several members asked whether the "
        "new library wing could be finished before winter, and the treasurer explained that the costs of steel and "
        "labour had risen since the spring. ")

def tiny():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tiny_tokenizer()), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, pad_token_id=0,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    return ss.from_modules(LlamaForCausalLM(cfg).double(), tiny_tokenizer(), name="tiny")

def run(lm, reps, counts, target):
    shared = shared_model.SharedLM(lm, max_new_tokens=4, disk_cache=False)
    chat = shared.format_prompt({"prompt": PARA * reps})
    job = progressive.Job(group="g", kind="m", heartbeat_s=None)
    events = []
    orig = job.report
    polls = []
    def rep(*a, **k):
        events.append((time.perf_counter(), time.process_time(), job.time_left.total, *a[-2:]))
        orig(*a, **k)
        st = job.status()
        polls.append((time.perf_counter(), st["done"], st["total"], st["eta_low_s"], st["eta_high_s"]))
    job.report = rep
    t0w, t0c = time.perf_counter(), time.process_time()
    with job.running():
        res = shared.salience(chat, target, counts=counts, job=job)
    num_t = res.num_targets
    # stage boundaries: grad rows end = first report (num_t, num_t); sampled stage = the reports with total != num_t
    ends = [e for e in events if e[3] == num_t and e[4] == num_t]
    g_end, s_start = ends[0], ends[1]  # the gradient rows' end; grad_x_input's (free) end = the sampled stage's start
    s_ev = [e for e in events if e[0] > s_start[0]]
    s_units = s_ev[-1][4]
    gw, gc = g_end[0] - t0w, g_end[1] - t0c
    sw, sc = s_ev[-1][0] - s_start[0], s_ev[-1][1] - s_start[1]
    end = s_ev[-1][0]
    first = [(round(end - t, 1), lo, hi) for t, d, tot, lo, hi in polls if t <= g_end[0] and lo is not None]
    inside = sum(1 for left, lo, hi in first if lo - 0.05 <= left <= hi + 0.05)
    print("first-stage polls (true rest, low, high):", first, file=sys.stderr)
    out = dict(first_stage_polls=len(first), truth_inside=inside,
               truth_above=sum(1 for left, lo, hi in first if left > hi + 0.05), num_t=num_t, grad_wall=gw,
               grad_cpu=gc, stage_units=s_units, stage_wall=sw, stage_cpu=sc,
               ratio_wall=(sw / s_units) / (gw / num_t), ratio_cpu=(sc / s_units) / (gc / num_t))
    return out, res

if __name__ == "__main__":
    which, reps, method, count = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    torch.set_num_threads(int(sys.argv[5]) if len(sys.argv) > 5 else 1)
    lm = tiny() if which == "tiny" else ss.load_model("default")
    field = {"ig": "ig_steps", "sg": "smooth_grad_samples"}[method]
    target = " They agreed to meet again next week to vote on it."
    n = len(lm.encode_prompt(lm.format_prompt(PARA * reps) if hasattr(lm, "format_prompt") else PARA * reps).ids)
    out, res = run(lm, reps, {field: count}, target)
    rows = 1 if method == "ig" else count  # rows per stage unit (SmoothGrad: a target's samples)
    out.update(model=which, prompt_tokens=n, method=method, count=count, rows_per_unit=rows,
               row_ratio_wall=out["ratio_wall"] / rows, row_ratio_cpu=out["ratio_cpu"] / rows)
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in out.items()}))
