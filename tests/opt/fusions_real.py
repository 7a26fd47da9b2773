#!/usr/bin/python3
"""Transformer fusions on real graphs (issue 6).

usage: fusions_real.py BASALT [--models DIR]

With the default models dir, the BERT models are generated (tests/parity/gen_models.py) and the
PaddleOCR recognizer fetched (scripts/fetch_models.sh) first when missing. For each model present
(a missing one is listed as skipped):
  * `basalt optimize MODEL --json --check -o OUT.onnx` must apply exactly the expected fusions
    (BERT-base as PyTorch exports it: 12 Attention, 12 GELU, 25 LayerNorm; BERT-mini 4/4/9; the
    PaddleOCR v4 recognizer: its 5 spelled-out LayerNorms), report no rejected LayerNorm or GELU
    candidate, and leave none of the spelled-out ops (ReduceMean, Pow, Sqrt, Erf, Softmax in BERT)
    in the saved model;
  * the saved optimized model, loaded back, gives outputs within rel. L2 1e-5 of level none;
    BERT is checked with a padding mask (zeros in the attention mask) as well as without;
  * with --standard-ops the saved model uses only ai.onnx ops and says why LayerNorm and GELU were
    not fused (their ops need opsets 17 and 20; BERT imports opset 14).
Prints one line per check and ends with "N passed, N failed".
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from opt_common import Tally, op_counts, optimize  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))

BERT_IN = ["--dim", "batch=2", "--dim", "sequence=64", "--fill", "input_ids=int:0,30522",
           "--fill", "token_type_ids=int:0,2"]
# name, path, input options (one run per list), expected fusion counts, ops that must be gone
MODELS = [
    ("bert_base", "generated/bert_base.onnx",
     [BERT_IN + ["--fill", "attention_mask=const:1"], BERT_IN + ["--fill", "attention_mask=int:0,2"]],
     {"Attention": 12, "GELU(Erf)": 12, "LayerNorm": 25}, ["ReduceMean", "Pow", "Sqrt", "Erf", "Softmax"]),
    ("bert_mini", "generated/bert_mini.onnx",
     [BERT_IN + ["--fill", "attention_mask=int:0,2"]],
     {"Attention": 4, "GELU(Erf)": 4, "LayerNorm": 9}, ["ReduceMean", "Pow", "Sqrt", "Erf", "Softmax"]),
    ("ppocr_v4_rec", "ppocr_v4_rec.onnx",
     [["--shape", "x=1x3x48x320", "--fill", "x=uniform:-1,1"]],
     {"LayerNorm": 5}, ["ReduceMean", "Pow", "Sqrt"]),
]
PATTERNS = ("Attention", "GELU(Erf)", "GELU(Tanh)", "LayerNorm")

T = Tally()
result = T.result


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    basalt = sys.argv[1]
    models_dir = os.path.join(ROOT, "models")
    if len(sys.argv) == 4 and sys.argv[2] == "--models":
        models_dir = sys.argv[3]
    if models_dir == os.path.join(ROOT, "models"):
        # Make what is missing (or stale: gen_models.py regenerates BERT built by an older generator).
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "parity", "gen_models.py"),
                        os.path.join(models_dir, "generated"), "--only", "bert"], capture_output=True, timeout=1800)
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch_models.sh"), models_dir, "ppocr_v4_rec"],
                       capture_output=True, timeout=1800)
    tmp = tempfile.mkdtemp(prefix="basalt_fusions_")
    for name, rel, runs, want, gone in MODELS:
        path = os.path.join(models_dir, rel)
        if not os.path.exists(path):
            result(False, f"{name} is present", f"{path} not found (scripts/prepare_models.sh makes it)")
            continue
        out = os.path.join(tmp, name + "_opt.onnx")
        for k, extra in enumerate(runs):
            p, rep = optimize(basalt, path, out, extra)
            if rep is None:
                result(False, f"{name}: optimize --check", (p.stderr or p.stdout).strip()[-400:])
                break
            what = " ".join(a for a in extra if "mask" in a) or "inputs " + " ".join(extra)
            chk = rep["check"]
            result(p.returncode == 0 and chk["passed"], f"{name}: optimized (saved, reloaded) vs level none, {what}",
                   f"max rel L2 {chk['max_rel_l2']:.3g}")
            if k:
                continue
            got = {pt: rep["fusions"].get(pt, 0) for pt in PATTERNS if rep["fusions"].get(pt, 0) or pt in want}
            result(got == want, f"{name}: fusion counts", f"got {got}, expected {want}")
            rej = [r for r in rep["rejected"] if r["pattern"] in ("LayerNorm", "GELU")]
            result(not rej, f"{name}: no LayerNorm/GELU candidate rejected",
                   "; ".join(f"{r['node']}: {r['reason']}" for r in rej[:3]))
            counts = op_counts(out)
            left = {op: counts[op] for op in gone if counts.get(op)}
            result(not left, f"{name}: no spelled-out ops left in the saved model", f"left {left}")
        if name == "bert_mini":
            std = os.path.join(tmp, name + "_std.onnx")
            p, rep = optimize(basalt, path, std, runs[0], standard_ops=True)
            ok = rep is not None and p.returncode == 0 and rep["check"]["passed"]
            result(ok, f"{name}: --standard-ops model reloaded, same outputs")
            if rep is not None:
                nonstd = [k for k in op_counts(std) if "::" in k]
                result(not nonstd, f"{name}: --standard-ops model uses only ai.onnx ops", ",".join(nonstd))
                reasons = {r["pattern"]: r["reason"] for r in rep["rejected"]}
                ok = "opset 17" in reasons.get("LayerNorm", "") and "opset 20" in reasons.get("GELU", "")
                result(ok, f"{name}: --standard-ops says why LayerNorm/GELU stay spelled out",
                       f"{reasons.get('LayerNorm', '-')} | {reasons.get('GELU', '-')}")
    return T.finish()


if __name__ == "__main__":
    sys.exit(main())
